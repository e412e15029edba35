"""Reports: the verdict JSON and its summary table, and Allure results reconciled with the pairing
verdict. (The HTML report and the release gate build on these.)

This folder also receives a qualification's outputs (``allure-results/``, ``verdict.json``); they are
ignored by git.
"""
