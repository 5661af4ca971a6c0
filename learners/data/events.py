"""The tape's record of a data check: DataChecked, and BadRowsSkipped under --on-bad-rows skip."""
from __future__ import annotations

from yeto.learners.data.check import CheckReport
from yeto.learners.data.spec import DataSpec
from yeto.schemas.base import Message
from yeto.schemas.data import BadRowsSkipped, DataChecked


def check_events(report: CheckReport, spec: DataSpec, cause: Message) -> list:
    """Events caused by `cause` (e.g. the LaunchRun command), with ids derived from it (idempotent re-publish)."""
    t = report.tokens
    events = [cause.caused(DataChecked, spec.source, data=spec.source, revision=report.revision,
                           fingerprint=report.fingerprint, data_format=spec.data_format, num_rows=report.num_rows,
                           num_bad=report.num_bad, formats=report.formats, num_tokens=t.num_tokens if t else None,
                           num_over_seq_len=t.num_over_seq_len if t else None, masking=t.masking if t else None)]
    if report.num_bad and spec.on_bad_rows == "skip":
        events.append(cause.caused(BadRowsSkipped, spec.source, num_skipped=report.num_bad,
                                   rows=[f"{b.where}: {b.reason}" for b in report.bad_rows]))
    return events
