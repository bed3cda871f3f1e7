"""The public grading API under attest's names: `grader.tool_use`, `grader.evaluate`."""

from attest_otel.grade.grader import check_tool_use, evaluate, grade, tool_use

__all__ = ["check_tool_use", "evaluate", "grade", "tool_use"]
