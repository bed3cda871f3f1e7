//! OTLP logs requests cut into resource/scope groups and log records, as `cut` does for
//! traces (attest_otel/sidecar/log_wire.py says what the sidecar does with them).

use crate::cut::{fields, split_with, Range, ResourceCutOf, WireErr};
use crate::fields::num;

/// One log record as cut: its record (tag and length included), and the fields that say
/// where it belongs (`LogRecord.trace_id`, `span_id`, `event_name`; empty when absent).
pub struct LogCut {
    pub record: Range,
    pub trace_id: Range,
    pub span_id: Range,
    pub event_name: Range,
}

/// Every ResourceLogs of a logs request cut into its parts: an ExportLogsServiceRequest is
/// framed like a traces request (resource 1, scope_logs 2; scope 1, log_records 2), only
/// the record's own fields differ. The last value of a field wins, as in a parser.
pub fn split_logs(data: &[u8]) -> Result<Vec<ResourceCutOf<LogCut>>, WireErr> {
    split_with(data, |record, vstart, vend| {
        let mut cut = LogCut {
            record,
            trace_id: (0, 0),
            span_id: (0, 0),
            event_name: (0, 0),
        };
        for f in fields(data, vstart, vend) {
            let f = f?;
            if f.wire_type != 2 {
                continue;
            }
            match f.number as u32 {
                num::LOG_RECORD_TRACE_ID => cut.trace_id = (f.start, f.end),
                num::LOG_RECORD_SPAN_ID => cut.span_id = (f.start, f.end),
                num::LOG_RECORD_EVENT_NAME => cut.event_name = (f.start, f.end),
                _ => {}
            }
        }
        Ok(cut)
    })
}
