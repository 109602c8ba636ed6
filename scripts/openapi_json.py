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
        # Set only so that settings load; nothing connects to it or writes there.
        os.environ.setdefault("WL_DATABASE_URL", "postgresql://unused@127.0.0.1:1/unused")
        os.environ.setdefault("WL_HOME", home)
        from work_ledger.api.app import create_app
        from work_ledger.config import load_settings

        schema = create_app(load_settings()).openapi()
    json.dump(schema, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
