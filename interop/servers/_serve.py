"""What every interop server shares: `--host` / `--port` flags and uvicorn on the app.

The servers in this folder are OpenEnv environments written the way OpenEnv's own `envs/*/server/` are: an
`Environment` subclass with pydantic Action / Observation / State models around the real game, served by the openenv
package's own `create_app`. They run from the project's .venv (`.venv/bin/python interop/servers/<name>.py --port N`).
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def serve(app_factory: Any, description: str) -> None:
    """Parses `--host` / `--port` and runs the app built by `app_factory()` with uvicorn until killed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(app_factory(), host=args.host, port=args.port, log_level=os.environ.get("LOG_LEVEL", "warning"))


def max_concurrent_envs() -> int:
    """`MAX_CONCURRENT_ENVS`, default 8, as OpenEnv's echo / textarena / openspiel apps read it."""
    return int(os.environ.get("MAX_CONCURRENT_ENVS", "8"))
