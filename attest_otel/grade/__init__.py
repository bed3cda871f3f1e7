"""Runs -> findings: the tool-use rules (pure), the model checks, and the grader."""
