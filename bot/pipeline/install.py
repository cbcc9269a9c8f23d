"""What the pipeline package gives the rest of the bot: the runner with the numbered systems
(18 → 20 → 30 → 50 → 55), what /retry and /undo call to take back an exchange, and the router every
channel hands its messages to.

Two steps, because the commands sit between them: `/retry` runs the pipeline again, and the router
routes to the commands."""

from __future__ import annotations

from dataclasses import dataclass

from bot.access.policy import AccessPolicy
from bot.clock import Clock
from bot.commands.registry import CommandRegistry
from bot.compaction.service import CompactionService
from bot.context.planner import ContextPlanner
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.ledger.turns import TurnLedger
from bot.llm.client import LlmClient
from bot.media.intake import MediaIntake, VisionSupport
from bot.media.store import MediaStore
from bot.memory.service import MemoryService
from bot.metrics import BotMetrics
from bot.pipeline.outbound import Outbound
from bot.pipeline.router import InboundRouter
from bot.pipeline.runner import PipelineRunner
from bot.pipeline.systems.auto_compaction import AutoCompactionSystem
from bot.pipeline.systems.context_building import ContextBuildingSystem
from bot.pipeline.systems.memory_persist import MemoryPersistSystem
from bot.pipeline.systems.rag_indexing import RagIndexingSystem
from bot.pipeline.systems.tool_loop import ToolLoopExecutionSystem
from bot.pipeline.trace_records import TraceStore
from bot.pipeline.traces import TurnTraces
from bot.rag.service import RagService
from bot.rag.uploads import DocumentReader
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionService
from bot.skills.library import SkillLibrary
from bot.tools.registry import ToolRegistry
from bot.workspace import Workspace


@dataclass(frozen=True)
class InstalledPipeline:
    """The runner, the turn ledger that hands out each message's turn, the one outbound step, and the
    systems after the reply, which take back what they wrote for a dropped exchange."""

    runner: PipelineRunner
    ledger: TurnLedger
    outbound: Outbound
    memory_persist: MemoryPersistSystem
    rag_indexing: RagIndexingSystem
    config_store: RuntimeConfigStore
    # What went into each chat's recent replies (the console shows it).
    traces: TurnTraces

    async def forget_exchange(self, session: AgentSession, dropped: list[Message]) -> None:
        """What the systems after the reply wrote for an exchange /retry or /undo dropped, each takes back."""
        await self.memory_persist.retract(session, dropped, (await self.config_store.current()).memory)
        await self.rag_indexing.retract(dropped)


def install(
    workspace: Workspace,
    clock: Clock,
    sessions: SessionService,
    config_store: RuntimeConfigStore,
    llm: LlmClient,
    planner: ContextPlanner,
    compaction: CompactionService,
    memory: MemoryService,
    rag: RagService,
    skills: SkillLibrary,
    tools: ToolRegistry,
    media_store: MediaStore,
    vision: VisionSupport,
    ledger: TurnLedger,
    metrics: BotMetrics,
    trace_store: TraceStore,
) -> InstalledPipeline:
    memory_persist = MemoryPersistSystem(memory, clock)
    rag_indexing = RagIndexingSystem(rag, clock)
    context_building = ContextBuildingSystem(workspace, clock, planner, memory, rag, skills)
    systems = [
        AutoCompactionSystem(compaction),
        context_building,
        ToolLoopExecutionSystem(
            llm, sessions, tools, workspace.root, compaction, media_store, vision, context_building.rebuild
        ),
        memory_persist,
        rag_indexing,
    ]
    traces = TurnTraces(trace_store, lambda: config_store.in_force().console.turns_kept)
    runner = PipelineRunner(systems, sessions, config_store, metrics, tools, traces)
    outbound = Outbound(metrics, clock)
    return InstalledPipeline(runner, ledger, outbound, memory_persist, rag_indexing, config_store, traces)


def install_router(
    pipeline: InstalledPipeline,
    commands: CommandRegistry,
    access: AccessPolicy,
    documents: DocumentReader,
    media: MediaIntake,
    metrics: BotMetrics,
) -> InboundRouter:
    router = InboundRouter(
        pipeline.runner, commands, access, pipeline.ledger, documents, media, pipeline.config_store, pipeline.outbound
    )
    metrics.watch_queues(router.dispatcher.queue_depths)
    return router
