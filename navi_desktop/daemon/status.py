"""``daemon.status``: what the daemon is doing, from what it has at hand. It never waits long
on a profile: a long write (an import) holds the file, and a client took the silence for a
daemon gone."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon import ollama_api
from navi_desktop.daemon.main import OLLAMA_CHECK_S
from navi_desktop.daemon.memory_methods import embedding_problem
from navi_desktop.errors import NaviError

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service

STATUS_WAIT_S = 1.0  # what daemon.status waits for a profile busy writing


async def daemon_status(service: Service) -> dict[str, Any]:
    # The status line asks after every turn: the monitor's last check answers it.
    health = await service.ollama_health(max_age_s=OLLAMA_CHECK_S)
    embedding = await service.ollama.embedding_health(OLLAMA_CHECK_S)
    pending, reason, busy = 0, None, []
    for name, store in list(service._stores.items()):  # one may open meanwhile
        try:
            # A long write (an import) holds the file: status answers without it, where
            # it waited behind it and a client took the silence for a daemon gone.
            going = [sid for (profile, sid) in service._timers if profile == name]
            n, r = await asyncio.wait_for(store.pending_status(going), STATUS_WAIT_S)
        except TimeoutError:
            busy.append(name)
            continue
        except NaviError:  # that profile's trouble: its own calls say what it is
            continue
        pending += n
        reason = reason or r
    return {
        "pid": os.getpid(),
        "uptime_s": round(time.monotonic() - service.started, 1),
        "ollama": ollama_api.health_result(health),
        # A separate embedding host's state; None when the chat host embeds.
        "embedding_ollama": None if embedding is None else ollama_api.health_result(embedding),
        "chat_model": service.settings.ollama.chat_model,
        "embedding_model": service.settings.ollama.embedding_model,
        "open_sessions": len(service._timers) + len(service._incognito),
        "pending_extractions": pending,
        "busy_profiles": busy,  # not counted above: busy writing
        "extracting": service.ends.status(),
        "last_failure": reason,
        "embedding_problems": {  # a model's garbage left texts without vectors
            name: problem
            for name, store in list(service._stores.items())
            if (problem := embedding_problem(store))
        },
        "profiles": service.profiles,
        "memory_server": service.remote.shown_server(),
        "profile_errors": service.profile_errors.to_dict() | await service.remote.errors(),
        "config_errors": service.config_errors,
        "env_errors": service.env_errors,
    }
