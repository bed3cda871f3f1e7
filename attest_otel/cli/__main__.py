"""`python -m attest_otel.cli`: the CLI without its console script (tests run it so)."""

from attest_otel.cli import main

if __name__ == "__main__":
    main()
