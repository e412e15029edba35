"""docs/writing-a-driver.md cannot drift from the contract: its facets table is the registry's and the
catalogue's, and every contract method it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from acceptance.contract import CORE, FACET_OF, OPTIONAL_CORE
from acceptance.contract.conformance import facets_markdown

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "writing-a-driver.md"


def test_the_facets_table_is_the_registrys():
    text = DOC.read_text()
    table = text.split("checks it -->\n", 1)[1].split("\n<!-- end of facets table -->", 1)[0]
    assert table == facets_markdown(), ("docs/writing-a-driver.md's facets table is stale: replace it with "
                                        "acceptance.contract.conformance.facets_markdown()")


def test_the_core_table_lists_exactly_the_core():
    text = DOC.read_text()
    core = text.split("## 1. The core", 1)[1].split("##", 1)[0]
    named = re.findall(r"^\| `(\w+)", core, flags=re.M)
    assert named == list(CORE)


def test_every_method_the_doc_names_in_backticks_as_a_call_is_in_the_contract_or_python():
    text = DOC.read_text()
    calls = set(re.findall(r"`(\w+)\(", text))
    known = {*CORE, *OPTIONAL_CORE, *FACET_OF, "factory", "isinstance"}
    unknown = calls - known
    assert not unknown, unknown


def test_the_sandbox_rules_are_cited_by_their_check_ids():
    """Each rule of "What the sandbox must look like" is a check-driver check: the section names every id of
    ``sandbox.RULES``, each once, as a rule of its own, and no id the checks do not have."""
    from acceptance.contract.sandbox import RULES

    section = DOC.read_text().split("### What the sandbox must look like", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^- \*\*(SBX-\d+):", section, flags=re.M) == list(RULES)
    assert set(re.findall(r"SBX-\d+", DOC.read_text())) == set(RULES)
