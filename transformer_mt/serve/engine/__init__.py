"""The decoding side of `tmt serve`: texts in from any thread, translations out as futures.

engine.py is the `Engine` (the one decoding thread, its life and its figures), intake.py turns
a request into the sentences it queues (job.py: the request's `Job`), limits.py says how much
it takes on (`ServeLimits`) and sizes its KV pool, admission.py queues sentences and admits
them within the budgets, scheduler.py steps the admitted ones as one continuous batch over
the paged KV cache (paged.py, row_groups.py), prefix_cache.py and caches.py keep what later
requests reuse. Texts are cut into sentences and their translations joined by the
`Translator`'s own rules (`Translator.split`, `translation.joined_lines`).

The HTTP side (serve/http/) knows none of this: only serve/contract.py, which `Engine`
implements.
"""

from transformer_mt.serve.engine.engine import Engine
from transformer_mt.serve.engine.job import Job
from transformer_mt.serve.engine.limits import ServeLimits

__all__ = ["Engine", "Job", "ServeLimits"]
