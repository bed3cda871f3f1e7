"""What `build_service` loads and checks before the sidecar opens a port: the policy file
(with its dialects) and the model judge, and the byte test of the declared dialects."""

from __future__ import annotations

from attest_otel.errors import PolicyError
from attest_otel.grade.llm import AnthropicJudge, judge_from_env
from attest_otel.grade.questions import Judge
from attest_otel.policy import Policy, load_policy
from attest_otel.sidecar.config import ServiceConfig
from attest_otel.sidecar.wire import DeclaredMarks

__all__ = ["declared_marks", "load_grading"]


def load_grading(config: ServiceConfig) -> tuple[Policy | None, Judge | None]:
    """The policy file and the model judge the config names, loaded and checked.

    What `load_service_config` cannot check alone: the policy file (with its dialects) is a
    file of its own, and whether a model can be asked depends on the environment. Every
    problem goes into one PolicyError naming the config, so a sidecar that cannot grade as
    configured never opens a port.
    """
    problems: list[str] = []
    policy: Policy | None = None
    if config.grading.policy is not None:
        try:
            policy = load_policy(config.grading.policy)
        except PolicyError as e:
            problems.append(f"grading.policy: {e}")
    judge: Judge | None = None
    model = config.grading.model
    if model.enabled:
        found = judge_from_env(model.model)
        if found is None:
            problems.append(
                "grading.model.enabled: true, but no model is available (set ANTHROPIC_API_KEY)"
            )
        elif isinstance(found, AnthropicJudge):  # ours: with the sidecar's settings
            judge = found.configured(
                model.model, max_concurrency=model.max_concurrency, content=config.content
            )
        elif config.content.mode != "keep":
            problems.append(
                f"content.mode: {config.content.mode} needs the Anthropic judge "
                f"(the model in use is a {type(found).__name__})"
            )
        else:
            judge = found
    if problems:
        raise PolicyError(config.source, problems)
    return policy, judge


def declared_marks(policy: Policy | None) -> DeclaredMarks | None:
    """The byte test for the policy's declared dialects, so their traces are held too."""
    if policy is None or not policy.dialects:
        return None
    marks = [d.markers() for d in policy.dialects]
    return DeclaredMarks(
        (k for m in marks for k in m.keys),
        (sc for m in marks for sc in m.scopes),
        (n for m in marks for n in m.names),
    )
