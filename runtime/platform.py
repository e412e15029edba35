"""The platform services around the instances: the product server and the model proxy, and the
authorities whose capabilities the controller hands to each instance's broker.

One ``Platform`` per controller. The provider is outside it (upstream; in the lab, the provider mock):
the platform knows only its URL and key, and only the proxy holds that key.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.authority import requestid
from runtime.authority.capabilities import Current, TokenAuthority
from runtime.authority.mcp_filter import McpFilter
from runtime.model.proxy import ModelProxy
from runtime.product.server import ProductServer

PINNED_TOOLS = Path(__file__).with_name("pinned_tools.json")
LEASE_TTL = 3600.0  # a lease is renewed by waking; tests shorten nothing through here
MODEL_TTL = 900.0  # the model capability is short-lived next to the grant


@dataclass(frozen=True)
class PlatformConfig:
    provider_url: str
    provider_key: str
    default_cap_usd: float = 1.0
    # The deployment's environment for the platform's own process, secrets included (as a secret manager
    # injects them): set while the platform runs, and never passed on to a sandbox (the launcher clears it).
    environment: Mapping[str, str] = field(default_factory=dict)


def load_pinned(path: Path = PINNED_TOOLS) -> dict:
    """The managed configuration's pinned tools: exact name -> JSON schema of the arguments."""
    return json.loads(path.read_text())


class Platform:
    def __init__(self, state: Path, config: PlatformConfig) -> None:
        self.state = state
        self.config = config
        self.current = Current()
        self.grants = TokenAuthority("grant")
        self.models = TokenAuthority("model")
        self.product = ProductServer(db_path=state / "product.sqlite", authority=self.grants, current=self.current)
        self.proxy = ModelProxy(provider_url=config.provider_url, provider_key=config.provider_key,
                                authority=self.models, current=self.current, ledger_path=state / "ledger.sqlite",
                                default_cap_usd=config.default_cap_usd)
        self.pinned = load_pinned()
        self.mcp_filter = McpFilter(self.pinned)  # every broker's, until an instance gets a pin of its own

    def start(self) -> Platform:
        self._environment_before = {key: os.environ.get(key) for key in self.config.environment}
        os.environ.update(self.config.environment)
        # The platform's own log (decisions and reasons, never payloads): an artifact the scanners read.
        # Each line carries the id of the request it was written for ("-" when none), as real platforms do.
        self.log_path = self.state / "platform.log"
        self._log_handler = logging.FileHandler(self.log_path)
        self._log_handler.addFilter(requestid.Filter())
        self._log_handler.setFormatter(
            logging.Formatter("%(asctime)s %(name)s %(levelname)s [%(request_id)s] %(message)s"))
        root = logging.getLogger("pairproof")
        root.addHandler(self._log_handler)
        root.setLevel(logging.INFO)
        root.propagate = False
        self.product.start()
        self.proxy.start()
        return self

    def stop(self) -> None:
        self.proxy.stop()
        self.product.stop()
        logging.getLogger("pairproof").removeHandler(self._log_handler)
        self._log_handler.close()
        for key, value in self._environment_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # -- the platform's log ----------------------------------------------------------------------------

    def set_log_level(self, level: int) -> int:
        """The platform's log level (an operator's setting, ``logging.INFO`` from the start); returns the
        level it replaces."""
        root = logging.getLogger("pairproof")
        before = root.level
        root.setLevel(level)
        return before

    def read_log(self) -> str:
        """The platform's log as written so far."""
        self._log_handler.flush()
        return self.log_path.read_text() if self.log_path.exists() else ""
