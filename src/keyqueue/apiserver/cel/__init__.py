"""CEL for the test API server: the engine (cel-python, ``celpy``, with the Kubernetes CEL libraries), the
static checks and cost estimate kube applies when a CRD or a policy is written, and CRD validation rules.

* :mod:`.syntax` -- parsing (celpy's Lark grammar; the optional-field syntax rewritten into calls);
* :mod:`.types` -- CEL types of structural-schema values and their size bounds;
* :mod:`.checker` -- declared names, fields, result type, worst-case cost;
* :mod:`.library` -- the Kubernetes libraries (lists, strings, regex, URLs, quantities, IPs, ``format``,
  optionals);
* :mod:`.program` -- :class:`~.program.Program`, a compiled expression, and JSON <-> CEL values;
* :mod:`.rules` -- ``x-kubernetes-validations``: checks of a CRD, evaluation on its objects.
"""

from .program import CelEvalError, Program, to_cel, to_json
from .syntax import CelSyntaxError
from .types import CelType, schema_type

__all__ = ["CelEvalError", "CelSyntaxError", "CelType", "Program", "schema_type", "to_cel", "to_json"]
