"""PPF family (csrc/ppf): point pair features, the model description, voting, pose clustering
(:mod:`.ops`), and the matcher built on them and on the geometry ops (:mod:`.matcher`)."""
from .matcher import PPFMatcher, PPFMatches  # noqa: F401
from .ops import (  # noqa: F401
    PoseClusters,
    PPFModel,
    PPFVotes,
    decode_keys,
    pose_cluster,
    ppf_features,
    ppf_model,
    ppf_vote,
)
