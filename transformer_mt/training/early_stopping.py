"""Early stopping: the best validation score so far, and how many validations since it.

A run stops once `patience` validations in a row (0: never) have not beaten the best score;
the score is higher-is-better (`ValidResult.score`: BLEU, or minus the NLL when BLEU is off).
Both counters are part of a checkpoint, so a resumed run stops where an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EarlyStopping:
    patience: int  # validations without improvement that end the run; 0: never
    best_score: float | None = None
    bad_validations: int = 0  # validations since the best one

    def record(self, score: float) -> bool:
        """Count a validation's score; returns whether it is the best so far."""
        improved = self.best_score is None or score > self.best_score
        if improved:
            self.best_score, self.bad_validations = score, 0
        else:
            self.bad_validations += 1
        return improved

    @property
    def exhausted(self) -> bool:
        """Patience is used up: the run should stop."""
        return self.patience > 0 and self.bad_validations >= self.patience
