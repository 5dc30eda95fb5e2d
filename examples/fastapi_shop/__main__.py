"""``python -m examples.fastapi_shop``: create the tables, then serve the shop with uvicorn
(settings from the environment: ``shop.ShopSettings.from_env``)."""

from __future__ import annotations

import logging

import uvicorn

from .api import create_api
from .shop import ShopSettings, create_tables


def main() -> None:
    """Create the tables and serve until interrupted."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = ShopSettings.from_env()
    create_tables(settings.database_url)
    uvicorn.run(create_api(settings), host=settings.host, port=settings.port,
                log_level="info")


if __name__ == "__main__":
    main()
