from . import pyg  # noqa: F401
from . import pytorch3d  # noqa: F401
