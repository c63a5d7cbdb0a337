"""Generated data with ground truth, for tests, benchmarks, demos and evaluations (pure torch, CPU,
seeded): :mod:`.mesh` (procedural and CGAL meshes, surface samples), :mod:`.lidar` (a street
scene seen by a spinning LiDAR or a depth camera, with its planes, and the plane detector's
scorer), :mod:`.tabletop` (meshes on a table seen by a depth camera, for PPF matching),
:mod:`.edges` (edge images with known circles and lines)."""

from . import edges, lidar, mesh, tabletop
from .edges import EdgeScene, synthetic_edges
from .mesh import SurfaceSamples, blob_mesh, box_mesh, load_mesh, sample_surface
