"""The docker target: an image under a real Docker engine (``driver.py``), and the reference agent image
built locally from this machine's packages (``image.py``)."""

from acceptance.targets.docker.driver import DockerTarget, clean, create, image_id, pin_image, preflight

__all__ = ["DockerTarget", "clean", "create", "image_id", "pin_image", "preflight"]
