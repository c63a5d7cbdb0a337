"""Hough family (csrc/hough): plane accumulators of clouds (:mod:`.planes`), circle and line
accumulators of edge images (:mod:`.images`), the shared peak search, and the detectors built on
them (:mod:`.detect_planes`, :mod:`.detect_images`)."""

from .detect_images import CircleDetections, LineDetections, circle_peaks, detect_circles, detect_lines, line_peaks
from .detect_planes import PlaneDetections, detect_planes
from .images import (
    circle_perimeter_size,
    edge_points,
    hough_circles,
    hough_circles_max,
    hough_circles_points,
    hough_lines,
    hough_lines_points,
    line_angles,
    line_distances,
    rho_offset,
)
from .planes import (
    Peaks,
    PlaneCandidates,
    PlaneFit,
    ball_cells,
    ball_peaks_to_planes,
    hough_peaks,
    hough_plane_peaks,
    hough_planes,
    hough_planes_ball,
    peaks_to_planes,
    plane_grid_normals,
    plane_detections,
    plane_labels,
    plane_refit,
    plane_suppress,
    rho_bins,
)
