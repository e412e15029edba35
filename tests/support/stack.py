"""The reference stack as the runtime tests and the benchmarks run it: a provider mock, the platform
(product server, model proxy) and a controller over a state root."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from acceptance.harness.lab.provider import ProviderMock
from runtime.controller import Controller
from runtime.platform import Platform, PlatformConfig

PROVIDER_KEY = "test-provider-key"  # synthetic: the mock's own key, nothing real


@contextmanager
def platform_stack(root: Path, run: str, *, engine_image: str | None = None, **controller_options
                   ) -> Iterator[tuple[Controller, ProviderMock]]:
    """A controller with its platform, and the provider mock behind it (to script the model's answers);
    ``controller_options`` go to the ``Controller`` (``agent``, ``ready_deadline``...)."""
    with ExitStack() as stack:  # torn down in reverse: controller, platform, provider
        provider = ProviderMock(PROVIDER_KEY).start()
        stack.callback(provider.stop)
        (root / "runs" / run).mkdir(parents=True, exist_ok=True)
        platform = Platform(root / "runs" / run, PlatformConfig(provider.url, PROVIDER_KEY)).start()
        stack.callback(platform.stop)
        engine = None
        if engine_image is not None:
            from runtime.isolation.containers import DockerEngine

            engine = DockerEngine(engine_image, run)
        controller = Controller(root, run, platform=platform, engine=engine, **controller_options)
        stack.callback(controller.close)
        yield controller, provider


@contextmanager
def platform_controller(root: Path, run: str, *, engine_image: str | None = None) -> Iterator[Controller]:
    """A controller with its platform and a provider mock; with ``engine_image``, its sandboxes are containers
    of that image (``runtime.isolation.containers.DockerEngine``)."""
    with platform_stack(root, run, engine_image=engine_image) as (controller, _provider):
        yield controller
