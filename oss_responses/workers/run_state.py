"""What one run of a response holds, shared by the modules that run it (``runner``, ``takeover``, ``on_loop``,
``handoff``, ``run_end``): its worker, its job and its lease; the translator, the generation and the prompt
once made; a stop asked before the generation existed. And the ``Outcome`` a run gives its task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from oss_responses.eventlog.writer import Fence
from oss_responses.harmony.render import RenderedPrompt
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.generation import Generation, StopCause
from oss_responses.workers.job import Job
from oss_responses.workers.journal import JournaledTranslator
from oss_responses.workers.lease import Lease

Outcome = Literal[
    "completed", "incomplete", "failed", "cancelled", "missing", "skipped", "leased_elsewhere", "running_here",
    "lease_lost", "handed_off", "engine_lost",
]


@dataclass
class Run:
    ctx: WorkerContext
    job: Job
    lease: Lease
    first_sequence_number: int = 0
    translator: JournaledTranslator | None = None
    generation: Generation | None = None
    rendered: RenderedPrompt | None = None
    stop_cause: StopCause | None = None  # asked before the generation existed
    early_prompt: RenderedPrompt | Exception | None = None  # rendered in the task thread (see prompting.render_early)
    fail_after_replay: str | None = None  # taken over too often: replayed, then failed

    @property
    def fence(self) -> Fence:
        return Fence(self.lease.key, self.lease.owner)
