"""PPF family (csrc/ppf): point pair features, the model description, voting, pose clustering
(:mod:`.ops`), and the matcher built on them and on the geometry ops (:mod:`.matcher`)."""

from .matcher import PPFMatcher, PPFMatches
from .ops import (
    PoseClusters,
    PPFModel,
    PPFVotes,
    decode_keys,
    pose_cluster,
    ppf_features,
    ppf_model,
    ppf_vote,
)
