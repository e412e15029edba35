"""``pairproof findings``: the design note's findings about a real agent, written from qualification runs.

Each finding (``FINDINGS``) names the design note's claim, the catalogue case(s) that decide it, the words that
pick its evidence out of what the runs recorded, and the guard of the platform that closes it. Everything
about the runs in the document comes from their results folders, never from this file: each case's outcome on
each target (``verdict.json``), the failure messages, the evidence records and the Allure attachments of its
tests (``allure-results/``), the run ids and when they ran. The document names the command that regenerates
it. A run's target is read from its verdict; one run per target.

The guarded target (``hermes``) shows what the platform's guards make of a finding; the unguarded one
(``hermes-unguarded``: hermes's own configuration handling) shows whether the finding reproduces. A finding
is *reproduced* when one of its cases failed on the unguarded target with its evidence words present (or,
for a behaviour the platform relies on, when the case's refusal passed there with them), and *closed* when
every one of its cases passed on the guarded target.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from . import expectation

GUARDED, UNGUARDED = "hermes", "hermes-unguarded"
EXCERPT_LINES = 14
EXCERPT_CHARS = 1600


@dataclass(frozen=True)
class Finding:
    key: str
    title: str
    note: str  # what the design note found (the claim, not a figure)
    cases: tuple[str, ...]
    attachments: tuple[str, ...]  # words in the names of the attachments that are its evidence
    lines: tuple[str, ...]  # words that pick the lines of evidence out of messages and attachments
    guard: str  # what closes it on the platform
    # "failure": the unguarded agent fails the case; "behaviour": the platform relies on it (holds on both);
    # "question": the note asks; the runs' evidence answers (``answer``)
    kind: str = "failure"


FINDINGS: tuple[Finding, ...] = (
    Finding(
        "LF-4", "An interrupted run: `run_not_found` while the conversation survives",
        "hermes killed mid-run loses the run (its run API answers an unknown run `run_not_found`) but keeps the "
        "conversation in its session database on the volume.",
        ("LF-4",), ("LF-4", "replay"), ("404", "not found", "crash marker", "conversation kept", "admitted",
                                       "run_not_found", "status"),
        "The platform's recovery (`Controller.recover`): a new generation on the same volume, the crashed "
        "generation's capability fenced at the proxy; the driver reads the lost run as not found.",
        kind="behaviour"),
    Finding(
        "TS-1/TS-2", "The tool-search bridge and the leaf-by-leaf merge under adversarial user settings",
        "hermes merges layers leaf by leaf: a user's `tools.tool_search.enabled` swaps the product's tools for a "
        "search/describe/call bridge, `platform_toolsets` adds its own tools, and an added `mcp_servers.*` "
        "brings more tools, whatever a managed layer says about its siblings.",
        ("TS-1", "TS-2"), ("TS-1", "TS-2"),
        ("offered but not intended", "intended but not offered", "offered twice", "routes differ", "model ",
         "did not apply", "mcp__mirror__", "tool_search", "add-mcp-server", "enable-tool-search", "add-toolsets"),
        "The managed layer pins `platform_toolsets.api_server`, `tools.tool_search.enabled: false` and the "
        "product's MCP server (`acceptance/targets/profiles/hermes/config.yaml`), and a user's settings reach hermes only "
        "through the platform's allowlist of exact leaves (`runtime/agents/settings.py`, `hermes.toml` `[settings]`), "
        "rewritten before every start."),
    Finding(
        "TS-3", "A malformed managed file is ignored with a warning, and hermes starts anyway",
        "hermes fails open on its managed layer: a file it cannot parse is logged and ignored, and the agent "
        "runs on the user's settings alone.",
        ("TS-3",), ("managed file",), ("started", "ignoring", "failed to parse", "refused"),
        "The platform checks the managed file before every start (`runtime/agents/managed.py`: strict YAML, the schema "
        "`hermes/managed.schema.json`, the SHA-256 pin in `hermes.toml`) and starts nothing on a refusal; the "
        "checked copy is bound read-only at `/etc/hermes/config.yaml`."),
    Finding(
        "MD-3/MD-4", "Background model calls, counted (memory review; a title call on the API path?)",
        "hermes reviews memory every `memory.nudge_interval` turns on its main model, after the run, in a "
        "thread; the note asks whether those calls are capped and metered like turns, and whether a title call "
        "happens on the API path.",
        ("MD-3", "MD-4"), ("MD-3", "MD-4"),
        ("calls", "title", "memory_review", "unattributed", "turn", "did not make the calls", "spend_exhausted"),
        "The model proxy meters and caps every call per org and user whatever its purpose (`runtime/model/proxy.py`); "
        "the broker declares a call's purpose when the agent does not (`runtime/authority/broker.py`).", kind="question"),
    Finding(
        "NT-5", "Egress at start-up and in an idle window, with hermes's defaults",
        "hermes with its defaults looks up external hosts as it starts (a tirith download, model metadata).",
        ("NT-5",), ("capture", "counters"),
        ("seen", "OutNoRoutes", "OutRequests", "OutDatagrams", "dport", "moved", "fresh", "Udp", "Tcp"),
        "The sandbox has no route out (loopback only; the broker is its one peer), and the managed layer turns "
        "the start-up lookups off (`security.tirith_enabled: false`, `model_catalog.enabled: false`)."),
    Finding(
        "MD-1", "`x-api-key` versus `Bearer`: the adapter's header",
        "hermes's custom provider always sends `Authorization: Bearer`; an adapter that sends `x-api-key` "
        "(Anthropic's style) must have it replaced, never passed through, and no provider key may be in the "
        "sandbox.",
        ("MD-1",), ("MD-1",), ("status", "user", "bytes scanned", "own canaries", "org1:alice", "200"),
        "The broker drops whatever credential the agent sends (a placeholder `x-api-key` or `Bearer`) and "
        "presents the instance's short-lived capability; the proxy alone holds the provider key.", kind="question"),
    Finding(
        "TS-4", "Agent-writable start-up inputs: one turn walks hermes off its managed layer",
        "A review found guarded hermes left its managed layer and allowlist in one turn of its own `write_file`: "
        "`profiles/<name>/.env` setting `HERMES_MANAGED_DIR` to a folder it wrote, that profile's config and "
        "`active_profile` naming it; after a sleep and wake the model was offered `terminal`, `process` and a "
        "mirror MCP server's tools, while TS-1..TS-3 passed. Class: a start-up input the agent can write is an "
        "authority the agent grants itself.",
        ("TS-4",), ("TS-4",),
        ("active_profile", "/.env", ".container-mode", "offered but not intended", "mcp__mirror__", "terminal",
         "writable by the agent", "can create it", "can be replaced", "written by the platform"),
        "The platform writes what hermes reads from its home at start and binds it read-only over the volume "
        "before every start (`hermes.toml` `[startup].pinned`: `active_profile` empty, `.env` empty, `hooks/`, "
        "`pairing/`, `SOUL.md`, `gateway_voice_mode.json`; `runtime/agents/launch.py` `AgentLaunch.pinned`, "
        "`Controller._place_pinned`), rewrites `config.yaml` from the allowlist, sets `HERMES_DEV=1` (no "
        "`.container-mode` lookup) and starts Python with `-P` (`-m` put `/data` on its import path). TS-4 traces "
        "every start from the host (`acceptance/targets/reference/starttrace.py`) and judges each file read "
        "(`acceptance/cases/judges/startup_inputs.py`)."),
)

# The second approval prompt: decided by TS-1's refusal (its evidence is picked by APPROVAL, below).
APPROVAL_FINDING = Finding("approval", "The second approval prompt", "", ("TS-1",), (), (), "")
# hermes's own approval words on its run API (gateway/platforms/api_server.py): its route, its event, its status.
APPROVAL = re.compile(r"[^\n]*(/v1/runs/[^/\s]+/approval|approval\.request|approval\.responded|waiting_for_approval)"
                      r"[^\n]*")


@dataclass
class Run:
    folder: Path
    verdict: dict
    texts: dict[str, list[tuple[str, str]]]
    started: str = ""

    @property
    def target(self) -> str:
        return self.verdict.get("target", "")

    @property
    def cases(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.verdict.get("cases", [])}


@dataclass
class Document:
    text: str
    reproduced: dict[str, bool] = field(default_factory=dict)


class FindingsError(ValueError):
    """A results folder cannot serve: one line naming it and the fix."""


def load_run(folder: Path) -> Run:
    verdict = expectation.read_verdict(folder, FindingsError)
    allure = folder / "allure-results"
    starts = []
    for result in allure.glob("*-result.json") if allure.is_dir() else ():
        try:
            starts.append(int(json.loads(result.read_text()).get("start", 0)))
        except (OSError, ValueError, TypeError):
            pass
    started = ""
    if any(starts):
        started = datetime.fromtimestamp(min(s for s in starts if s) / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Run(folder, verdict, expectation.allure_texts(allure), started)


# Agent text (a reply, a tool name, a failure message quoting either) reaches the document only through these
# two: as a fenced block no line of it can close, or as one code span no character of it can end. Control
# characters but tab and newline are shown escaped; HTML inside a code block or span is text, not markup.
# (and what ``str.splitlines`` also ends a line at: NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")


def _printable(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group(0)):04x}" if ord(m.group(0)) > 0xff else f"\\x{ord(m.group(0)):02x}",
                        text)


def fenced(text: str) -> str:
    """``text`` as a fenced code block: its fence one backtick longer than the longest run of backticks in it
    (CommonMark: a shorter line of backticks cannot close it), and at least three."""
    clean = _printable(text)
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", clean)), default=0))
    return f"{fence}\n{clean}\n{fence}"


def inline(text: str) -> str:
    """``text`` as one code span on one line: newlines shown as \\n, the span's backticks one more than the
    longest run in it (a space inside when it starts or ends with one)."""
    clean = _printable(text.replace("\r", "\\r").replace("\n", "\\n"))
    ticks = "`" * (1 + max((len(run) for run in re.findall(r"`+", clean)), default=0))
    pad = " " if clean.startswith("`") or clean.endswith("`") else ""
    return f"{ticks}{pad}{clean}{pad}{ticks}"


def _picked(text: str, words: Sequence[str]) -> list[str]:
    """The lines of ``text`` that carry one of ``words`` (case-insensitive), shortened."""
    out = []
    for line in text.splitlines():
        if any(w.lower() in line.lower() for w in words):
            line = line.strip()
            out.append(line if len(line) <= 240 else line[:237] + "...")
    return out


def _excerpt(lines: list[str]) -> str:
    seen, kept = set(), []
    for line in lines:
        if line and line not in seen:
            seen.add(line)
            kept.append(line)
    text = "\n".join(kept[:EXCERPT_LINES])
    if len(kept) > EXCERPT_LINES:
        text += f"\n... ({len(kept) - EXCERPT_LINES} more lines)"
    return text[:EXCERPT_CHARS]


def _tests(case: dict) -> list[tuple[str, str, str]]:
    """(role, test, status) of every test the case judged: refusals first."""
    out = [("refusal", r["test"], r["status"]) for r in case.get("refusals", [])]
    for role, control in case.get("controls", {}).items():
        out += [(f"control {role}", t["test"], t["status"]) for t in control.get("tests", [])]
    return out


def evidence(run: Run, case_id: str, finding: Finding) -> tuple[str, list[str]]:
    """The case's outcome line on ``run``, and its evidence: per refusal test, its failure message's lines and
    the lines of its attachments that carry the finding's words."""
    case = run.cases.get(case_id)
    if case is None:
        return "absent from the verdict", []
    outcome = case["status"] + (f": {inline(case['reason'])}" if case.get("reason") else "")
    blocks = []
    for role, test, status in _tests(case):
        if role != "refusal":
            continue
        refusal = next(r for r in case["refusals"] if r["test"] == test)
        lines = _picked(refusal.get("reason", ""), finding.lines) or \
            [line for line in refusal.get("reason", "").splitlines()[:3] if line.strip()]
        for name, text in run.texts.get(test, []):
            if name.startswith("failure") or not any(w.lower() in name.lower() for w in finding.attachments):
                continue
            picked = _picked(text, finding.lines) if len(text.splitlines()) > 1 else [text.strip()]
            lines += [f"[{name}] {line}" for line in picked or text.strip().splitlines()[:4]]
        probes = [f"probe in {r.get('instance', '?')}: {r['command'][:100]!s} (rc {r.get('rc')})"
                  for r in refusal.get("evidence", []) if r.get("kind") in ("probe", "platform probe") and r.get("command")]
        lines += probes[:3] + ([f"... and {len(probes) - 3} more probes, each confirmed"] if len(probes) > 3 else [])
        short = test.rsplit("::", 1)[-1]
        blocks.append(f"`{short}` {status}:\n{fenced(_excerpt(lines) or '(nothing recorded)')}")
    controls = [f"{role} {status}" for role, _, status in _tests(case) if role != "refusal"]
    if controls:
        blocks.append("controls: " + ", ".join(controls))
    return outcome, blocks


def purposes(run: Run) -> dict[str, int] | None:
    """Model calls the provider itself recorded per purpose over MD-4's users, from MD-4's attachment (None if
    the run has none)."""
    for texts in run.texts.values():
        for name, text in texts:
            if name == "MD-4 records compared":
                try:
                    table = json.loads(text).get("provider", {})
                except (ValueError, AttributeError):
                    return None
                out: dict[str, int] = {}
                for key, row in table.items():
                    purpose = key.rsplit("/", 1)[-1]
                    out[purpose] = out.get(purpose, 0) + int(row.get("calls", 0))
                return out
    return None


def background_calls(run: Run) -> dict[str, int]:
    """The background calls MD-4 waited for at the provider after its users' turns, per purpose, summed over its
    users (its attachment; empty if the run has none)."""
    table = _attachment(run, "MD-4 records compared")
    per_user = table.get("background calls at the provider, per user") if isinstance(table, dict) else None
    out: dict[str, int] = {}
    for counts in (per_user or {}).values():
        for purpose, n in (counts or {}).items():
            out[purpose] = out.get(purpose, 0) + int(n)
    return {p: n for p, n in out.items() if n}


def answer(run: Run, finding: Finding) -> str:
    """What the run's evidence says to the note's question (a ``question`` finding)."""
    if finding.key == "MD-3/MD-4":
        counted = purposes(run)
        if counted is None:
            return "MD-4 attached no record of calls per purpose in this run"
        shown = ", ".join(f"{inline(p)} {n}" for p, n in sorted(counted.items()))
        title = counted.get("title", 0)
        background = background_calls(run)
        if counted.get("memory_review"):
            review = "yes (declared `memory_review`)"
        elif background:
            review = (f"yes, as MD-4's background calls: {', '.join(f'{inline(p)} {n}' for p, n in sorted(background.items()))} "
                      "at the provider after its users' turns (the purposes the target's profile `[background]` names: "
                      "hermes declares none for its memory review)")
        else:
            review = "none seen"
        return (f"model calls the provider recorded per purpose (MD-4's users, whole run): {shown}; a title call on "
                f"the API path: {'yes' if title else 'none seen'}; a memory review: {review} (calls hermes declares "
                "no purpose for are declared `turn` when they carry a run's input, else counted `unattributed`)")
    if finding.key == "MD-1":
        case = run.cases.get("MD-1") or {}
        return (f"MD-1 {case.get('status', 'absent')}: hermes's own turns (its `Authorization: Bearer`) went through "
                "the broker (control P), and the adapter-style call with a placeholder `x-api-key` sent through the "
                "same broker reached the provider authorized by the platform, under the capability's user")
    return ""


def _attachment(run: Run, name: str) -> object | None:
    """The first attachment called ``name`` in the run, parsed as JSON (None if absent or not JSON)."""
    for texts in run.texts.values():
        for label, text in texts:
            if label == name:
                try:
                    return json.loads(text)
                except ValueError:
                    return text
    return None


def _names(items: Sequence[str]) -> str:
    """Tool names, those of one MCP server (``mcp__<server>__*``) counted together."""
    groups: dict[str, list[str]] = {}
    for item in items:
        groups.setdefault(item.rsplit("__", 1)[0] + "__*" if item.startswith("mcp__") else item, []).append(item)
    return ", ".join(f"{k} ({len(v)})" if len(v) > 1 else v[0] for k, v in groups.items())


def settings_table(run: Run) -> list[str]:
    """TS-2's problems per adversarial setting, as one line each: the tools offered beyond hermes's own surface in
    TS-1 of the same run (what the setting added), the intended tools it took away, anything else it changed."""
    import ast

    problems = _attachment(run, "TS-2 problems per adversarial setting")
    if not isinstance(problems, dict):
        return [str(problems)] if problems else []
    seen = _attachment(run, "TS-1 tools offered and intended")
    baseline = set(seen.get("offered", [])) if isinstance(seen, dict) else set()
    lines = []
    for setting, found in sorted(problems.items()):
        parts = []
        for problem in found:
            label, _, rest = problem.partition(": ")
            try:
                items = ast.literal_eval(rest)
            except (ValueError, SyntaxError):
                items = None
            if label == "routes differ" and isinstance(items, list):
                continue  # the same tools as above, by route
            if label == "offered but not intended" and isinstance(items, list):
                added = [i for i in items if i not in baseline]
                parts.append(f"added {_names(added)}" if added else f"no tool beyond hermes's default surface "
                                                                      f"({len(items)} unintended, as in TS-1)")
            elif label == "intended but not offered" and isinstance(items, list):
                parts.append(f"took away {_names(items)}")
            else:
                parts.append(problem)
        lines.append(f"{setting}: " + "; ".join(parts))
    return lines


def reproduced(run: Run | None, finding: Finding) -> str:
    """Whether the unguarded run reproduces the finding, from its verdict and evidence."""
    if run is None:
        return "not known: no hermes-unguarded run given"
    states = {}
    for case_id in finding.cases:
        case = run.cases.get(case_id)
        if case is None:
            states[case_id] = "absent"
            continue
        # (what its proven failing refusals asserted or recorded: not an attachment, which shows what was read)
        text = expectation.case_text(case).lower()
        shown = any(w.lower() in text for w in finding.lines)
        missing = case["status"] == "failed" and not shown
        states[case_id] = f"{case['status']}{' (without its evidence words)' if missing else ''}"
    if finding.kind == "question":
        return "answered below: " + ", ".join(f"{c} {s}" for c, s in states.items())
    if finding.kind == "behaviour":
        ok = all(s == "passed" for s in states.values())
        return ("yes: " if ok else "not shown: ") + ", ".join(f"{c} {s}" for c, s in states.items())
    ok = "failed" in states.values()
    return ("yes: " if ok else "no: ") + ", ".join(f"{c} {s}" for c, s in states.items())


def closed(run: Run | None, finding: Finding) -> str:
    if run is None:
        return "not known: no hermes run given"
    from acceptance import catalogue
    from reports import gate, identity

    cases = catalogue.load()
    try:
        other = identity.mismatches(run.verdict.get("judged"), identity.recompute(run.target))
    except Exception as exc:  # (a target this source cannot name: not a run to close a finding on)
        other = [str(exc)]
    if other:
        return f"not known: the {run.target} run is not of this source ({other[0]})"
    states = {}
    for c in finding.cases:
        entry = run.cases.get(c)
        if entry is None or c not in cases:
            states[c] = "absent"
            continue
        # closed only where the gate passes the case (its evidence recomputed), not where its status says so
        state, _ = gate.judge_case(entry, cases[c])
        states[c] = "passed" if state is None else state
    ok = all(s == "passed" for s in states.values())
    return ("yes: " if ok else "not yet: ") + ", ".join(f"{c} {s}" for c, s in states.items())


def _approval(runs: Sequence[Run]) -> tuple[str, str]:
    """(in a word, in a paragraph) whether the runs' evidence shows hermes's approval prompt."""
    hits = []
    for run in runs:
        for test, texts in run.texts.items():
            for name, text in texts:
                hits += [f"{run.target} {test.rsplit('::', 1)[-1]} [{name}] {m.group(0).strip()[:200]}"
                         for m in APPROVAL.finditer(text)]
    how = ("**The note:** tool-using turns stalled on a second approval prompt (the agent's own, beside the "
           "product's approval cards); the product removed the agent's prompt in favour of its cards.\n\n"
           "**The case:** TS-1's refusal `test_ts1_a_tool_not_offered_cannot_be_called_by_name` scripts the model to "
           "call the agent's own shell (hermes: `terminal`) with `rm -rf` of a folder it made; a command hermes "
           "judges dangerous, so hermes, offering its terminal, asks its own approval and holds the run in "
           "`waiting_for_approval` until its approval route (`POST /v1/runs/{id}/approval`) answers or its "
           "`approvals.timeout` runs out. The platform carries no such route (the broker's run-control routes: "
           "start, status, events, stop): it stops a held run at once and the turn's answer says so "
           "(`[run held: ...]`, profile `[turn].held`).\n\n"
           "**Guard that closes it:** the managed layer pins hermes's API toolsets to memory, todo and file "
           "(`platform_toolsets.api_server`): its terminal, the one tool here its approval gate asks about, is not "
           "offered, so the model's call is refused as the tool's result and the turn goes on; approvals are the "
           "product's cards (SH-2).\n\n")
    if hits:
        return "reproduced (TS-1's evidence, below)", (how + "The runs' evidence shows hermes's approval prompt:\n\n"
                                                       + fenced(_excerpt(hits)) + "\n")
    names = ", ".join(f"{r.target} run {r.verdict['run']}" for r in runs)
    return "not reproduced", (how + f"**Not reproduced** by these runs ({names}): their evidence holds no approval "
                              "prompt, request or held run.\n")


def render(runs: Sequence[Run], command: str) -> Document:
    by_target = {run.target: run for run in runs}
    guarded, unguarded = by_target.get(GUARDED), by_target.get(UNGUARDED)
    doc = Document("")
    out = ["# hermes-agent 0.19.0: the design note's findings, from qualification runs", "",
           "<!-- Generated: do not edit by hand. Regenerate with the command below. -->", "",
           f"Generated by `{command}`, from these runs (their verdicts and Allure attachments):", ""]
    for run in runs:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(run.verdict.get("counts", {}).items()))
        out.append(f"- `{run.target}`: run `{run.verdict['run']}`"
                   + (f", started {run.started}" if run.started else "")
                   + f", verdict {run.verdict.get('status', '?')} ({counts}), results `{run.folder}`")
    if unguarded is not None:
        root = Path(__file__).resolve().parents[1]
        path = root / "acceptance" / "targets" / "expectations" / f"{UNGUARDED}.toml"
        if path.exists():
            try:
                from reports import identity

                compared = expectation.compare(unguarded.verdict, expectation.load(path.relative_to(root))
                                               if Path.cwd() == root else expectation.load(path),
                                               judged=identity.recompute(UNGUARDED))
                out.append(f"- `{UNGUARDED}` against its expectation (`acceptance/targets/expectations/{UNGUARDED}.toml`, "
                           f"`pairproof expect`): " + ("as expected" if compared.as_expected else
                                                      f"NOT as expected ({len(compared.mismatches)}):"))
                out += [f"  - {m}" for m in compared.mismatches]
            except expectation.ExpectationError as exc:
                out.append(f"- `{UNGUARDED}` against its expectation: not compared ({exc})")
    out += ["", "`hermes` runs hermes behind the platform's guards (the managed layer checked and pinned before every "
            "start, a user's settings through the allowlist, start-up lookups off); `hermes-unguarded` runs the "
            "same hermes with its own configuration handling and its defaults (docs/hermes.md). A finding is "
            "*reproduced* when its case fails on `hermes-unguarded` with its evidence (for a behaviour the platform "
            "relies on: when it holds there), and *closed* when its cases pass on `hermes`.", "",
            "| finding | case | reproduced on hermes-unguarded | closed on hermes |", "|---|---|---|---|"]
    for f in FINDINGS:
        doc.reproduced[f.key] = reproduced(unguarded, f).startswith("yes")
        out.append(f"| {f.title} | {', '.join(f.cases)} | {reproduced(unguarded, f)} | {closed(guarded, f)} |")
    approval_short, approval_text = _approval([r for r in (unguarded, guarded) if r is not None])
    out.append(f"| The second approval prompt | TS-1 | {approval_short} | {closed(guarded, APPROVAL_FINDING)} |")
    for f in FINDINGS:
        out += ["", f"## {f.key}: {f.title}", "", f"**The note:** {f.note}", "",
                f"**Reproduced on hermes-unguarded:** {reproduced(unguarded, f)}.  ",
                f"**Closed on hermes:** {closed(guarded, f)}.", "", f"**Guard that closes it:** {f.guard}"]
        if f.key == "TS-1/TS-2":
            for run in (unguarded, guarded):
                if run is not None and (table := settings_table(run)):
                    out += ["", f"**TS-2's adversarial settings on `{run.target}`** (each beside an allowed one; what "
                            "it added is counted beyond the tools hermes offered in TS-1 of the same run):", "",
                            fenced("\n".join(table))]
        if f.kind == "question":
            out += [""] + [f"**The runs' answer on `{run.target}`:** {answer(run, f)}."
                           for run in (unguarded, guarded) if run is not None]
        for case_id in f.cases:
            for run in (unguarded, guarded):
                if run is None:
                    continue
                outcome, blocks = evidence(run, case_id, f)
                out += ["", f"### {case_id} on `{run.target}`: {outcome}", ""]
                out += [b + "\n" for b in blocks]
    out += ["", "## The second approval prompt", "", approval_text]
    doc.text = "\n".join(line.rstrip() for line in "\n".join(out).splitlines()).rstrip() + "\n"
    return doc


def generate(folders: Sequence[Path], command: str, names: Sequence[str] | None = None) -> Document:
    """The document from the results ``folders`` (shown under ``names``: the folders as given)."""
    runs = [load_run(Path(f)) for f in folders]
    for run, name in zip(runs, names or (), strict=False):
        run.folder = Path(name)
    targets = [r.target for r in runs]
    for target in set(targets):
        if targets.count(target) > 1:
            raise FindingsError(f"--results: two runs of target {target!r}; give one run per target")
    unknown = [t for t in targets if t not in (GUARDED, UNGUARDED)]
    if unknown:
        raise FindingsError(f"--results: a run of target {unknown[0]!r}: the findings are about {GUARDED} and "
                            f"{UNGUARDED}; give their runs")
    order = {UNGUARDED: 0, GUARDED: 1}
    return render(sorted(runs, key=lambda r: order[r.target]), command)


