"""The flags of `python -m bot onboard`, apart from onboarding itself: the command line lists them (`--help`)
without importing the model client and the checks that onboarding runs."""

from __future__ import annotations

import argparse

DEFAULT_MODEL = "gpt-4o-mini"


def add_onboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--telegram-token", help="the token @BotFather gave")
    parser.add_argument("--base-url", help="the OpenAI-compatible endpoint (empty: OpenAI)")
    parser.add_argument("--api-key", help="the endpoint's key")
    parser.add_argument("--model", help=f"the chat model (default {DEFAULT_MODEL})")
    parser.add_argument("--model-window", type=int, help="input tokens of a model models.json does not know")
    parser.add_argument(
        "--extraction-model",
        help="the model that reads exchanges into the knowledge graph (default: a cheaper fast model the endpoint "
        "offers, else the chat model)",
    )
    parser.add_argument("--owner-id", type=int, help="the owner's Telegram user id")
    parser.add_argument("--pair", action="store_true", help="set the owner by a code they send to the bot")
    parser.add_argument("--timezone", help="IANA time zone, e.g. Europe/Berlin (default: the machine's)")
    parser.add_argument("--workspace", help="the workspace folder (default ./workspace)")
    parser.add_argument("--env-file", default=".env", help="where the settings are written (default ./.env)")
    parser.add_argument("--no-input", action="store_true", help="ask nothing: take every answer from the flags")
