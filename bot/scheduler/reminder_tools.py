"""The reminder tools the model calls (`schedule_reminder`, `list_reminders`, `cancel_reminder`)
and the `/reminders` command."""

from __future__ import annotations

from pydantic import BaseModel, Field

from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.scheduler.reminders import InvalidReminder, ReminderService
from bot.tools.registry import Tool, ToolContext, ToolError, ToolRegistry


class ScheduleReminderArgs(BaseModel):
    text: str = Field(min_length=1, max_length=2000, description="what to remind the user of")
    at: str | None = Field(None, max_length=100, description="absolute local time, ISO 8601, e.g. 2026-12-24T18:00")
    delay: str | None = Field(None, max_length=100, description="relative delay, e.g. '45m', '2h30m', '1d'")
    cron: str | None = Field(
        None, max_length=200, description="repeat on a 5-field cron schedule in the user's time zone"
    )


class CancelReminderArgs(BaseModel):
    id: str = Field(max_length=100, description="the reminder's id, as list_reminders shows it")


class NoArgs(BaseModel):
    pass


def register_reminder_tools(tools: ToolRegistry, commands: CommandRegistry, reminders: ReminderService) -> None:
    async def schedule(args: ScheduleReminderArgs, ctx: ToolContext) -> str:
        try:
            reminder = await reminders.add(
                ctx.session_id, ctx.channel_type, ctx.chat_id, args.text, at=args.at, delay=args.delay, cron=args.cron
            )
        except InvalidReminder as error:
            raise ToolError(str(error)) from error
        return f"Scheduled {reminders.describe(reminder)}"

    async def list_pending(args: NoArgs, ctx: ToolContext) -> str:
        return await _listing(reminders, ctx.session_id)

    async def cancel(args: CancelReminderArgs, ctx: ToolContext) -> str:
        if not await reminders.cancel(ctx.session_id, args.id):
            raise ToolError(f"this chat has no reminder {args.id!r}")
        return f"Cancelled reminder {args.id}."

    async def show(request: CommandRequest) -> str:
        return await _listing(reminders, request.inbound.session_id)

    tools.register(Tool("schedule_reminder", "Remind the user of something later, once or repeating. "
                        "Give exactly one of at, delay or cron.", ScheduleReminderArgs, schedule))  # fmt: skip
    tools.register(Tool("list_reminders", "List this chat's pending reminders.", NoArgs, list_pending))
    tools.register(Tool("cancel_reminder", "Cancel one of this chat's reminders.", CancelReminderArgs, cancel))
    commands.register(Command("reminders", "your pending reminders", show))


async def _listing(reminders: ReminderService, session_id: str) -> str:
    pending = await reminders.pending(session_id)
    if not pending:
        return "No reminders are pending."
    return "Pending reminders:\n" + "\n".join(reminders.describe(reminder) for reminder in pending)
