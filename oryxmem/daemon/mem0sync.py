"""The daemon's mem0 thread (memory.backend = "mem0"): mem0 and the rows kept equal.

Every ``mem0.poll_seconds``, and when saves were mirrored into the rows, it runs a full
pass of backends/mem0_mirror.py for every agent: what the rows gained goes to mem0,
what they lost leaves it, and what another mem0 client added or deleted for one of
the agents reaches MEMORY.md. A memory brought in is saved through the memory thread
(the one write path) and is in the rows before the pass goes on. A pass that fails (the
mem0 server down) is logged and tried again at the next; it never holds up a save.
"""

from __future__ import annotations

import logging

from oryxmem.backends.mem0_link import link_for
from oryxmem.backends.mem0_mirror import Mem0Mirror, MirrorReport
from oryxmem.daemon.background import Background
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.service import MemoryService, SaveRequest
from oryxmem.store.format import Entry

log = logging.getLogger("oryxmem.daemon")


class Mem0Sync(Background):
    what = "the mem0 pass"

    def __init__(self, service: MemoryService, worker: MemoryWorker) -> None:
        poll = float(service.config.get("mem0.poll_seconds"))
        super().__init__(service, name="oryxmem-mem0", idle_seconds=poll, retry_seconds=poll)
        self.worker = worker

    def step(self) -> bool:
        self.run_pass()
        return False  # the next pass when woken (saves reached the rows) or after the poll

    def _save(self, agent: str, content: str, scope: str) -> Entry:
        """A memory another mem0 client added: MEMORY.md first, then the rows."""
        ref = self.service.resolve(agent or None)
        result = self.worker.save(ref, SaveRequest(content, scope, "mem0")).result(timeout=60)
        self.worker.flush()  # in the rows before the pass reads them again
        return result.entry

    def run_pass(self) -> list[MirrorReport]:
        workspace = self.service.workspace
        link = link_for(workspace, self.service.config)
        mirror = Mem0Mirror(self.service.db, link, str(workspace.root), self._save)
        self.worker.flush()  # every acknowledged save is in the rows
        reports = [mirror.pass_agent(agent) for agent in ["", *workspace.agent_names()]]
        for report in reports:
            if report.changed:
                log.info(
                    "mem0 %s: %d added, %d deleted there; %d brought in, %d removed here",
                    report.agent or "(global)",
                    report.added,
                    report.deleted,
                    report.brought_in,
                    report.removed,
                )
        return reports
