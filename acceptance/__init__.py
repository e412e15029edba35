"""The pairproof suite: the pytest plugin (targets, pairing, proof, reporting) and the isolation cases.

``plugin`` holds options and hooks; ``contract`` is the narrow interface a target implements;
``targets/`` has one driver per file; ``probe`` runs testinfra modules inside a sandbox with proof of
execution; ``pairing`` enforces that every refusal is paired with controls that passed; ``cases/`` is the
catalogue of DESIGN §6 made executable.
"""
