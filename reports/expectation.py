"""``pairproof expect``: a verdict compared with a checked-in expectation of which cases must fail.

A target qualified *to show its failures* (``hermes-unguarded``: a real agent with its own configuration
handling) is not judged by the gate, which wants the whole catalogue passed. Its expectation
(``acceptance/targets/expectations/<target>.toml``) names each case that must fail, why (one line: the agent's
behaviour), and the evidence a run must show for it (words found in what the failing refusals reported: their
failure messages, their evidence records and their Allure attachments). A verdict is *as expected* when:

- every case the expectation names **failed** (a refusal failed: the verdict's own status, whatever its
  controls say, which the line notes), and its evidence shows every word listed; a case expected to fail
  that is **broken** is not an expected failure (the harness could not judge it: it says nothing about the
  agent), nor one that passes, is not covered or was skipped (the expected failure vanished: hermes changed,
  or the case no longer sees it);
- every other case of the catalogue **passed** (a new failure, a broken case, a case not covered: not as
  expected);
- the run itself has no problem beyond its cases' (pytest ended with 0 or 1, no narrowed collection).

File format (TOML)::

    target = "hermes-unguarded"          # the verdict's target; another is bad input
    [fails.TS-2]
    why = "hermes merges a user's config.yaml ..."
    evidence = ["add-mcp-server", "mcp__mirror__"]
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

CASE_ID = re.compile(r"^[A-Z]{2}-\d+$")


class ExpectationError(ValueError):
    """The expectation file (or the verdict it is compared with) cannot serve: one line naming it and the fix."""


@dataclass(frozen=True)
class ExpectedFailure:
    case: str
    why: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Expectation:
    path: Path
    target: str
    fails: Mapping[str, ExpectedFailure]


@dataclass
class Comparison:
    as_expected: bool = True
    lines: list[str] = field(default_factory=list)  # one per case, in catalogue order
    mismatches: list[str] = field(default_factory=list)


def load(path: str | Path, catalogue_ids: list[str] | None = None) -> Expectation:
    """The expectation in ``path``; ExpectationError naming the file and what is wrong with it."""
    path = Path(path)
    fix = "see reports/expectation.py for the format"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ExpectationError(f"--expected {path}: no such file; give an expectation such as "
                               "acceptance/targets/expectations/hermes-unguarded.toml") from None
    except IsADirectoryError:
        raise ExpectationError(f"--expected {path}: is a folder, not a file; give the expectation's .toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ExpectationError(f"--expected {path}: cannot read it ({reason}); give a readable .toml") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationError(f"--expected {path}: not TOML ({exc}); {fix}") from None
    unknown = sorted(set(data) - {"target", "fails"})
    if unknown:
        raise ExpectationError(f"--expected {path}: unknown key(s) {', '.join(unknown)}: only target and [fails.<case>]; {fix}")
    target = data.get("target")
    if not isinstance(target, str) or not target:
        raise ExpectationError(f"--expected {path}: target (the target whose verdict it describes) is missing or "
                               f"not text; {fix}")
    fails = data.get("fails", {})
    if not isinstance(fails, dict):
        raise ExpectationError(f"--expected {path}: fails must be tables [fails.<case>]; {fix}")
    if catalogue_ids is None:
        from acceptance import catalogue

        catalogue_ids = list(catalogue.load())
    out = {}
    for case, entry in fails.items():
        where = f"--expected {path}: [fails.{case}]"
        if not CASE_ID.match(case) or case not in catalogue_ids:
            raise ExpectationError(f"{where}: not a case of acceptance/catalogue.toml; name a catalogue case")
        if not isinstance(entry, dict) or sorted(set(entry) - {"why", "evidence"}):
            extra = sorted(set(entry) - {"why", "evidence"}) if isinstance(entry, dict) else "not a table"
            raise ExpectationError(f"{where}: unexpected {extra}: only why and evidence; {fix}")
        why, evidence = entry.get("why"), entry.get("evidence")
        if not isinstance(why, str) or not why.strip() or "\n" in why.strip():
            raise ExpectationError(f"{where}: why must be one line of text (the agent's behaviour); {fix}")
        if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) and e.strip() for e in evidence):
            raise ExpectationError(f"{where}: evidence must be a non-empty list of words a failing run shows; {fix}")
        out[case] = ExpectedFailure(case, why.strip(), tuple(evidence))
    return Expectation(path, target, out)


def allure_texts(allure_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """Per test (``pairproof_nodeid``): its failure message and trace, and each text attachment (its own and its
    steps'), as ``(name, text)``. Nothing for a folder that does not exist."""
    out: dict[str, list[tuple[str, str]]] = {}
    if not allure_dir.is_dir():
        return out
    for result in sorted(allure_dir.glob("*-result.json")):
        try:
            data = json.loads(result.read_text())
        except (OSError, ValueError):
            continue
        nodeid = next((label.get("value") for label in data.get("labels", []) if label.get("name") == "pairproof_nodeid"),
                      None)
        if not nodeid:
            continue
        texts = out.setdefault(nodeid, [])
        details = data.get("statusDetails") or {}
        for key in ("message", "trace"):
            if details.get(key):
                texts.append((f"failure {key}", details[key]))

        def walk(node: dict, texts: list = texts) -> None:
            for attachment in node.get("attachments", []):
                source = allure_dir / attachment.get("source", "")
                if attachment.get("type", "").startswith(("text/", "application/json")) and source.is_file():
                    try:
                        texts.append((attachment.get("name", ""), source.read_text(errors="replace")))
                    except OSError:
                        pass
            for step in node.get("steps", []):
                walk(step, texts)

        walk(data)
    return out


def case_text(case: dict, texts: Mapping[str, list[tuple[str, str]]]) -> str:
    """Everything a case's failing refusals reported, as one text to look for evidence in."""
    parts = [case.get("reason", "")]
    for refusal in case.get("refusals", []):
        if refusal.get("status") != "failed":
            continue
        parts += [refusal.get("reason", ""), json.dumps(refusal.get("evidence", []))]
        parts += [f"{name}: {text}" for name, text in texts.get(refusal.get("test", ""), [])]
    return "\n".join(parts)


def compare(verdict: dict, expectation: Expectation,
            texts: Mapping[str, list[tuple[str, str]]] | None = None) -> Comparison:
    """``verdict`` against ``expectation``; ``texts`` are the run's Allure texts per test (``allure_texts``)."""
    if verdict.get("target") != expectation.target:
        raise ExpectationError(f"the verdict is of target {verdict.get('target')!r}, {expectation.path} describes "
                               f"{expectation.target!r}: compare a {expectation.target} run with it")
    texts = texts or {}
    result = Comparison()

    def mismatch(line: str) -> None:
        result.mismatches.append(line)
        result.lines.append(line)

    cases = {c["id"]: c for c in verdict.get("cases", [])}
    for case_id in sorted(set(expectation.fails) - set(cases)):
        mismatch(f"{case_id}: expected to fail, absent from the verdict: the expected failure vanished")
    for case_id, case in cases.items():
        status, reason = case.get("status"), case.get("reason", "")
        said = f" ({reason})" if reason else ""
        expected = expectation.fails.get(case_id)
        if expected is None:
            if status == "passed":
                result.lines.append(f"{case_id}: passed, as expected")
            elif status == "failed":
                mismatch(f"{case_id}: a new failure{said}: fix it, or add it to {expectation.path} with why and evidence")
            elif status == "broken":
                mismatch(f"{case_id}: broken{said}: not as expected (every case not expected to fail must pass)")
            else:
                mismatch(f"{case_id}: {status}{said}: not as expected (every case not expected to fail must pass)")
            continue
        unjudged = [f"control {role} {c.get('status')}" for role, c in case.get("controls", {}).items()
                    if c.get("status") != "passed"]
        unjudged += [f"refusal {r['test'].rsplit('::', 1)[-1]} {r['status']}" for r in case.get("refusals", [])
                     if r.get("status") not in ("passed", "failed")]
        if status == "failed":
            # A refusal that failed showed the leak itself: its controls (that the probe can see one, that the
            # allowed path works) do not change that, but the line says when one did not pass.
            note = f" (note: {', '.join(unjudged)})" if unjudged else ""
            text = case_text(case, texts).lower()
            missing = [word for word in expected.evidence if word.lower() not in text]
            if missing:
                mismatch(f"{case_id}: failed, but its evidence does not show {', '.join(map(repr, missing))} "
                         f"(expected: {expected.why}){note}")
            else:
                result.lines.append(f"{case_id}: failed, as expected: {expected.why}{note}")
        elif status == "broken":
            mismatch(f"{case_id}: expected to fail, is broken{said}: a broken case is never an expected failure "
                     "(the harness could not judge it); the expected failure vanished")
        else:
            mismatch(f"{case_id}: expected to fail, {status}{said}: the expected failure vanished ({expected.why})")
    exit_code = verdict.get("pytest_exit")
    if exit_code not in (0, 1):
        mismatch(f"the run ended with pytest exit {exit_code}: not a run that judged the catalogue")
    for problem in verdict.get("problems", []):
        if not re.match(r"^[A-Z]{2}-\d+: ", problem):
            mismatch(f"the run: {problem}")
    result.as_expected = not result.mismatches
    return result


def read_verdict(results: Path, error: type[ValueError] = ValueError) -> dict:
    """The verdict of the results folder ``results`` (its ``verdict.json``, a run id and a list of cases), or
    ``error`` with one line naming the folder and the fix (``--results`` is how every command takes it)."""
    path = results / "verdict.json"
    try:
        verdict = json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"--results {results}: no verdict.json: run `pairproof qualify` into it first") from None
    except (OSError, ValueError) as exc:
        raise error(f"--results {results}: verdict.json cannot be read ({exc}); rerun `pairproof qualify`") from None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("cases"), list) or not verdict.get("run"):
        raise error(f"--results {results}: verdict.json is not a verdict (no run or cases); rerun `pairproof qualify`")
    return verdict


def judge(results: Path, expectation: Expectation) -> Comparison:
    """The verdict in ``results`` (and its Allure texts) against ``expectation``."""
    return compare(read_verdict(results, ExpectationError), expectation, allure_texts(results / "allure-results"))
