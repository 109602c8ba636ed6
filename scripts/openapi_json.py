"""Print the API's OpenAPI document (what GET /openapi.json answers), without a database.

The app is built but never started: its lifespan, which would connect, does not run. The
TypeScript client generates its types from this (clients/typescript: `npm run generate`).

    uv run python scripts/openapi_json.py > openapi.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        # The document must not depend on who runs this (WL_METRICS_TOKEN documents a 401 on
        # /metrics): no WL_* of the caller's. These two are set only so that settings load;
        # nothing connects to the URL or writes in the folder.
        for name in [name for name in os.environ if name.startswith("WL_")]:
            del os.environ[name]
        os.environ["WL_DATABASE_URL"] = "postgresql://unused@127.0.0.1:1/unused"
        os.environ["WL_HOME"] = home
        from work_ledger.api.app import create_app
        from work_ledger.config import load_settings

        schema = create_app(load_settings()).openapi()
    json.dump(schema, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
