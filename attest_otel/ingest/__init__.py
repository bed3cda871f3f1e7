"""OTLP in -> spans: decoders for files and bytes, receivers, and trace-by-id sources."""
