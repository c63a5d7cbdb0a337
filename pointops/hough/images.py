"""2D circle and line Hough transforms of edge images (wraps csrc/hough/{edges,circles,lines}).

Both accumulators are scikit-image's, batched: ``hough_circles`` is
``skimage.transform.hough_circle(image, radii, normalize=False)`` per image (the same Bresenham
circles, repeated offsets included) and ``hough_lines`` is ``skimage.transform.hough_line(image,
theta)`` (the same rho offset, bin count and rounding). Edge maps are compacted to point lists on
the device (:func:`edge_points`, order kept); point lists can also be passed directly
(``*_points`` functions). Counts are int32; weighted votes are exact fixed-point sums returned as
float32 (csrc/hough/edges.h). CPU and CUDA agree bit for bit and nothing syncs with the host.
"""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .._checks import (
    check_dim,
    check_dtype,
    check_floating,
    check_optional_batch_vector,
    check_output_fits,
    check_same_device,
    check_shape,
    check_tensor,
)
from .._tables import host_table

# ---- fake kernels (output shapes from the arguments only; the checks of csrc/hough/*_cpu.cpp) ----

_INDEX = (torch.int32, torch.int64)


def _check_point_lists(
    points: Tensor, lengths: Optional[Tensor], weights: Optional[Tensor], height: int, width: int
) -> None:
    check_dim(points, "points", 3, "(B, P, 2)")
    torch._check(points.shape[2] == 2, lambda: f"points must have shape (B, P, 2) (x, y), got {tuple(points.shape)}")
    torch._check(points.dtype in _INDEX, lambda: f"points must be int32 or int64 pixel coordinates, got {points.dtype}")
    check_optional_batch_vector(lengths, "lengths", points.shape[0], points)
    if weights is not None:
        check_floating(weights, "weights")
        check_shape(weights, "weights", (points.shape[0], points.shape[1]))
        check_same_device(weights, "weights", points)
    torch._check(
        0 <= height <= 32767 and 0 <= width <= 32767,
        lambda: f"height and width must be in [0, 32767], got {height} and {width}",
    )


def _check_gradients(gradients: Optional[Tensor], points: Tensor) -> None:
    if gradients is not None:
        check_floating(gradients, "gradients")
        check_shape(gradients, "gradients", (points.shape[0], points.shape[1], 2))
        check_same_device(gradients, "gradients", points)


@torch.library.register_fake("pointops::edge_points")
def _edge_points_fake(edges, capacity=-1):
    torch._check(edges.dim() == 3, lambda: f"edges must have shape (B, H, W), got {tuple(edges.shape)}")
    torch._check(capacity >= -1, lambda: f"capacity must be >= 0, or -1 for H * W, got {capacity}")
    cap = edges.shape[1] * edges.shape[2] if capacity < 0 else capacity
    check_output_fits(edges.device, f"capacity = {capacity}", (edges.shape[0], cap, 2), 4)
    return (
        edges.new_empty((edges.shape[0], cap, 2), dtype=torch.int32),
        edges.new_empty((edges.shape[0],), dtype=torch.int64),
    )


@torch.library.register_fake("pointops::hough_circles_points")
def _hough_circles_points_fake(points, lengths, weights, gradients, height, width, radii, max_angle=0.0):
    _check_point_lists(points, lengths, weights, height, width)
    _check_gradients(gradients, points)
    torch._check(all(0 <= r <= 32767 for r in radii), lambda: f"radii must be in [0, 32767], got {radii}")
    check_output_fits(
        points.device,
        f"{len(radii)} radii of a {height} x {width} image",
        (points.shape[0], len(radii), height, width),
        4 if weights is None else 8,
    )
    dtype = torch.int32 if weights is None else torch.float32
    return points.new_empty((points.shape[0], len(radii), height, width), dtype=dtype)


@torch.library.register_fake("pointops::hough_circles_max_points")
def _hough_circles_max_points_fake(
    points, lengths, weights, gradients, height, width, radii, max_angle=0.0, normalize=False
):
    _check_point_lists(points, lengths, weights, height, width)
    _check_gradients(gradients, points)
    torch._check(len(radii) > 0, lambda: "radii must hold at least one radius for hough_circles_max_points")
    dtype = torch.int32 if weights is None and not normalize else torch.float32
    shape = (points.shape[0], height, width)
    return points.new_empty(shape, dtype=dtype), points.new_empty(shape, dtype=torch.int64)


@torch.library.register_fake("pointops::hough_circles_map")
def _hough_circles_map_fake(edges, radii):
    torch._check(edges.dim() == 3, lambda: f"edges must have shape (B, H, W), got {tuple(edges.shape)}")
    torch._check(all(0 <= r <= 32767 for r in radii), lambda: f"radii must be in [0, 32767], got {radii}")
    check_output_fits(
        edges.device, f"{len(radii)} radii", (edges.shape[0], len(radii), edges.shape[1], edges.shape[2]), 4
    )
    return edges.new_empty((edges.shape[0], len(radii), edges.shape[1], edges.shape[2]), dtype=torch.int32)


@torch.library.register_fake("pointops::hough_circles_max_map")
def _hough_circles_max_map_fake(edges, radii, normalize=False):
    torch._check(edges.dim() == 3, lambda: f"edges must have shape (B, H, W), got {tuple(edges.shape)}")
    torch._check(len(radii) > 0, lambda: "radii must hold at least one radius for hough_circles_max_map")
    shape = (edges.shape[0], edges.shape[1], edges.shape[2])
    return (
        edges.new_empty(shape, dtype=torch.float32 if normalize else torch.int32),
        edges.new_empty(shape, dtype=torch.int64),
    )


@torch.library.register_fake("pointops::circle_detections")
def _circle_detections_fake(scores, radius_index, radii, k, min_distance, threshold):
    torch._check(scores.dim() == 3, lambda: f"scores must have shape (B, H, W), got {tuple(scores.shape)}")
    check_dtype(radius_index, "radius_index", torch.int64)
    check_shape(radius_index, "radius_index", scores.shape)
    check_same_device(radius_index, "radius_index", scores, "scores")
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = scores.shape[0]
    return (scores.new_empty((batch, k, 3), dtype=torch.float32), scores.new_empty((batch, k), dtype=torch.float32))


@torch.library.register_fake("pointops::line_detections")
def _line_detections_fake(acc, theta, k, min_distance, min_angle, threshold, glue):
    torch._check(acc.dim() == 3, lambda: f"acc must have shape (B, n_rho, T), got {tuple(acc.shape)}")
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = acc.shape[0]
    return (acc.new_empty((batch, k, 2), dtype=torch.float32), acc.new_empty((batch, k), dtype=torch.float32))


def rho_offset(height: int, width: int) -> int:
    """ceil(sqrt(height^2 + width^2)): rho bin d of :func:`hough_lines` is the distance d - offset
    (scikit-image's formula, in float64)."""
    return int(math.ceil(math.sqrt(float(height * height + width * width))))


@torch.library.register_fake("pointops::hough_lines_points")
def _hough_lines_points_fake(points, lengths, weights, height, width, theta):
    _check_point_lists(points, lengths, weights, height, width)
    dtype = torch.int32 if weights is None else torch.float32
    torch._check(len(theta) <= 1 << 20, lambda: f"theta must have at most 2^20 angles, got {len(theta)}")
    shape = (points.shape[0], 2 * rho_offset(height, width) + 1, len(theta))
    check_output_fits(points.device, f"{len(theta)} angles (theta) of a {height} x {width} image", shape, 4)
    return points.new_empty(shape, dtype=dtype)


# ---- tables ----


def line_angles(n_theta: int = 180) -> List[float]:
    """n_theta angles over [-pi/2, pi/2), bit for bit numpy.linspace(-pi/2, pi/2, n_theta,
    endpoint=False): scikit-image's default theta (180 angles, 1 degree apart). n_theta is an
    int in [1, 2^20], the angles hough_lines takes."""
    if n_theta < 1 or n_theta > 1048576:
        raise ValueError("n_theta must be an int in [1, 2^20], got " + str(n_theta))
    step = math.pi / n_theta
    return [j * step + (-math.pi / 2) for j in range(n_theta)]


def line_distances(height: int, width: int) -> Tensor:
    """The rho value of every bin of :func:`hough_lines` for an image of that size, float64
    (scikit-image's ``dists``: -offset, ..., offset)."""
    offset = rho_offset(height, width)
    return torch.arange(-offset, offset + 1, dtype=torch.float64)


def circle_perimeter_size(radius: int) -> int:
    """Offsets of the rasterized circle of that radius, repeats included: len(
    skimage.draw.circle_perimeter(0, 0, radius)[0]), the count ``normalize`` divides by. radius is
    an int in [0, 32767], the radii the accumulators take."""
    if radius < 0 or radius > 32767:
        raise ValueError("radius must be an int in [0, 32767], got " + str(radius))
    c = 0
    r = radius
    d = 3 - 2 * radius
    steps = 0
    while r >= c:
        steps += 1
        if d < 0:
            d += 4 * c + 6
        else:
            d += 4 * (c - r) + 10
            r -= 1
        c += 1
    return 8 * steps


# ---- wrappers ----


def edge_points(edges: Tensor, capacity: int = -1) -> Tuple[Tensor, Tensor]:
    """Edge map to point list, on the map's device.

    Args:
        edges: (B, H, W) any dtype; a pixel is an edge iff it is nonzero (NaN included, as in
            ``numpy.nonzero``).
        capacity: the most points kept per image; -1 (default) keeps all (H * W slots).

    Returns:
        points (B, C, 2) int32 (x, y) = (column, row) in row-major order (numpy.nonzero's), -1
        past the image's count; lengths (B,) int64, min(edge pixels, C).
    """
    check_tensor(edges, "edges", "(B, H, W)")
    return torch.ops.pointops.edge_points(edges, capacity)


def _gather_pixels(maps: Tensor, points: Tensor) -> Tensor:
    """maps (B, C, H, W) at the points' pixels -> (B, P, C) float32; -1 padding reads pixel 0
    (those rows are past lengths and never read)."""
    width = maps.shape[3]
    flat = (points[..., 1].long() * width + points[..., 0].long()).clamp(min=0)
    values = maps.flatten(2).gather(2, flat.unsqueeze(1).expand(-1, maps.shape[1], -1))
    return values.transpose(1, 2).to(torch.float32)


def _check_map(edges: Tensor) -> None:
    if edges.dim() != 3:
        raise ValueError("edges must have shape (B, H, W), got " + str(edges.dim()) + " dims")


def _edge_inputs(edges: Tensor, weighted: bool, gradients: Optional[Tensor]):
    _check_map(edges)
    points, lengths = torch.ops.pointops.edge_points(edges, -1)
    weights: Optional[Tensor] = None
    if weighted:
        weights = _gather_pixels(edges.unsqueeze(1), points)[..., 0]
    grads: Optional[Tensor] = None
    if gradients is not None:
        if (
            gradients.dim() != 4
            or gradients.shape[1] != 2
            or gradients.shape[0] != edges.shape[0]
            or gradients.shape[2:] != edges.shape[1:]
        ):
            raise ValueError(
                "gradients must have shape (B, 2, H, W) matching edges (B, H, W) "
                + str(edges.shape)
                + ", got "
                + str(gradients.shape)
            )
        grads = _gather_pixels(gradients, points)
    return points, lengths, weights, grads


def _normalized(acc: Tensor, radii: List[int]) -> Tensor:
    sizes = host_table(torch.tensor([circle_perimeter_size(r) for r in radii], dtype=torch.float32), acc.device)
    return acc.to(torch.float32) / sizes.view(-1, 1, 1)


def hough_circles(
    edges: Tensor,
    radii: List[int],
    weighted: bool = False,
    normalize: bool = False,
    gradients: Optional[Tensor] = None,
    max_angle: float = 0.1,
) -> Tensor:
    """Circle Hough accumulator of edge maps: scikit-image's ``hough_circle``, batched.

    Every edge pixel (x, y) votes at (x + dx, y + dy) for each offset of the rasterized circle of
    each radius (``skimage.draw.circle_perimeter(0, 0, r)``, repeated offsets included), when
    that centre is inside the image.

    Args:
        edges: (B, H, W); nonzero pixels are edges. H, W <= 32767.
        radii: R radii in [0, 32767], e.g. ``list(range(40, 101))``.
        weighted: each edge votes its value instead of 1 (exact fixed-point sums of the values
            rounded to 2^-16, returned as float32; csrc/hough/edges.h).
        normalize: divide each radius' plane by its circle's offset count
            (:func:`circle_perimeter_size`), float32, as scikit-image's ``normalize=True``
            (which adds 1/n per vote in float64: equal up to rounding).
        gradients: (B, 2, H, W) image gradient (gx, gy), or None. Given: an edge votes only for
            centres within ``max_angle`` radians of its gradient line (either way; the
            direction test of OpenCV's HOUGH_GRADIENT), which cuts the votes of large images;
            edges with a zero gradient cast none.

    Returns:
        (B, R, H, W): int32 counts, float32 if weighted or normalize. ``acc[b, i, y, x]`` is the
        score of the circle of radius ``radii[i]`` centred at pixel (x, y).

    Plain votes (not weighted, no gradients) go through ``pointops::hough_circles_map``, which
    reads the map itself (on CUDA the map packed into bits, 32 centres counted per lane; the same
    bits as the point lists).
    """
    check_tensor(edges, "edges", "(B, H, W)")
    if not weighted and gradients is None:  # an edge map's plain votes: no point list needed
        _check_map(edges)
        acc = torch.ops.pointops.hough_circles_map(edges, radii)
    else:
        points, lengths, weights, grads = _edge_inputs(edges, weighted, gradients)
        acc = torch.ops.pointops.hough_circles_points(
            points, lengths, weights, grads, edges.shape[1], edges.shape[2], radii, max_angle
        )
    return _normalized(acc, radii) if normalize else acc


def hough_circles_max(
    edges: Tensor,
    radii: List[int],
    weighted: bool = False,
    normalize: bool = False,
    gradients: Optional[Tensor] = None,
    max_angle: float = 0.1,
) -> Tuple[Tensor, Tensor]:
    """The best radius of every centre: ``hough_circles(...).max(1)`` without the (B, R, H, W)
    accumulator (each GPU block folds its radii into a per-centre maximum in shared memory).

    Arguments as :func:`hough_circles`; radii must not be empty.

    Returns:
        scores (B, H, W): int32 counts, float32 if weighted or normalize; radius_index (B, H, W)
        int64, the first radius (index into ``radii``) with that score. Equal to
        ``hough_circles(edges, radii, ...).max(1)`` bit for bit. Plain votes go through
        ``pointops::hough_circles_max_map``, as :func:`hough_circles`.
    """
    check_tensor(edges, "edges", "(B, H, W)")
    if not weighted and gradients is None:
        _check_map(edges)
        return torch.ops.pointops.hough_circles_max_map(edges, radii, normalize)
    points, lengths, weights, grads = _edge_inputs(edges, weighted, gradients)
    return torch.ops.pointops.hough_circles_max_points(
        points, lengths, weights, grads, edges.shape[1], edges.shape[2], radii, max_angle, normalize
    )


def hough_circles_points(
    points: Tensor,
    radii: List[int],
    image_size: List[int],
    lengths: Optional[Tensor] = None,
    weights: Optional[Tensor] = None,
    normalize: bool = False,
    gradients: Optional[Tensor] = None,
    max_angle: float = 0.1,
) -> Tensor:
    """:func:`hough_circles` of point lists: points (B, P, 2) int32/int64 (x, y), lengths (B,)
    int64 or None, image_size [H, W]; weights (B, P) and gradients (B, P, 2) per point. Points
    outside the image cast no vote; repeated points vote once each."""
    check_tensor(points, "points", "(B, P, 2)")
    acc = torch.ops.pointops.hough_circles_points(
        points, lengths, weights, gradients, image_size[0], image_size[1], radii, max_angle
    )
    return _normalized(acc, radii) if normalize else acc


def hough_lines(edges: Tensor, theta: Optional[List[float]] = None, weighted: bool = False) -> Tensor:
    """Line Hough accumulator of edge maps: scikit-image's ``hough_line``, batched.

    Args:
        edges: (B, H, W); nonzero pixels are edges.
        theta: angles in radians; default :func:`line_angles` (180 over [-pi/2, pi/2)).
        weighted: each edge votes its value (float32 exact fixed-point sums, see
            :func:`hough_circles`).

    Returns:
        (B, n_rho, T) int32 counts (float32 if weighted), n_rho = 2 offset + 1 with offset =
        :func:`rho_offset`; bin (d, j) holds the edges with round(x cos theta_j + y sin theta_j)
        = d - offset, (x, y) = (column, row), rounding halves away from zero
        (:func:`line_distances` gives the rho of each bin).
    """
    check_tensor(edges, "edges", "(B, H, W)")
    angles = line_angles(180) if theta is None else theta
    points, lengths, weights, _ = _edge_inputs(edges, weighted, None)
    return torch.ops.pointops.hough_lines_points(points, lengths, weights, edges.shape[1], edges.shape[2], angles)


def hough_lines_points(
    points: Tensor,
    image_size: List[int],
    theta: Optional[List[float]] = None,
    lengths: Optional[Tensor] = None,
    weights: Optional[Tensor] = None,
) -> Tensor:
    """:func:`hough_lines` of point lists (see :func:`hough_circles_points`)."""
    check_tensor(points, "points", "(B, P, 2)")
    angles = line_angles(180) if theta is None else theta
    return torch.ops.pointops.hough_lines_points(points, lengths, weights, image_size[0], image_size[1], angles)
