from . import pytorch3d  # noqa: F401
