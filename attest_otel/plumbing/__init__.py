"""Small shared pieces under the stages that may not import each other: the event-loop HTTP
server (`httpserver`, the OTLP/HTTP receiver's and `/metrics`'), control characters made
visible in text output (`terminal`), and one WARNING per interval with a count
(`throttled_log`). docs/architecture.md places them in the layers."""
