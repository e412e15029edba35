"""The local target (``local_target``) with a platform log that names the request id of each turn, as a real
platform's record does: for the plugin's rule that a control proves what it observed through the platform.
``create_forgetful`` keeps the same log but never names a request id (a platform that records nothing of the
calls a control made)."""

from __future__ import annotations

from support.local_target import LocalTarget


def create(options):
    return RecordingTarget(options, record_ids=True)


def create_forgetful(options):
    return RecordingTarget(options, record_ids=False)


class RecordingTarget(LocalTarget):
    name = "local-recording"

    def __init__(self, options, *, record_ids: bool) -> None:
        super().__init__(options)
        self.record_ids = record_ids
        self.lines: list[str] = []

    def turn(self, ref, message, *, request_id=""):
        self.lines.append(f"turn {ref.key} answered" + (f" [{request_id}]" if self.record_ids and request_id else ""))
        return "ok"

    def platform_log(self) -> str:
        return "\n".join(self.lines)

    def engine_logs(self):
        return {}
