//! The cuts of traces and logs requests: every record once, groups kept where they were,
//! framing the cut cannot re-frame named.

mod common;

use attest_otel_wire::cut::{self, fields, split};
use attest_otel_wire::logs::split_logs;
use common::*;

fn text(data: &[u8], r: cut::Range) -> &[u8] {
    &data[r.0..r.1]
}

#[test]
fn a_group_is_a_field_the_cut_keeps_whole() {
    let g = group(20, &[ld(1, b"k"), group(21, b"\x00\x01")].concat());
    let found: Vec<_> = fields(&g, 0, g.len())
        .collect::<Result<_, _>>()
        .expect("a group");
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].number, found[0].wire_type, found[0].end),
        (20, 3, g.len())
    );
    assert!(fields(&tag(20, 4), 0, 1).next().unwrap().is_err());
    let unclosed = [tag(20, 3), tag(21, 3), tag(20, 4)].concat();
    assert!(fields(&unclosed, 0, unclosed.len())
        .next()
        .unwrap()
        .is_err());
}

#[test]
fn deep_groups_do_not_overflow_the_stack() {
    let deep = [tag(20, 3).repeat(200_000), tag(20, 4).repeat(200_000)].concat();
    let f = fields(&deep, 0, deep.len())
        .next()
        .unwrap()
        .expect("closed");
    assert_eq!(f.end, deep.len());
}

#[test]
fn spans_are_cut_around_groups() {
    let scope = ld(1, &ld(1, b"lib"));
    let data = ld(
        1,
        &[
            ld(1, b"res"),
            group(7, b""),
            ld(
                2,
                &[
                    scope.clone(),
                    ld(2, &span(1, b"a")),
                    group(9, &[tag(3, 0), vec![0]].concat()),
                    ld(2, &span(3, b"b")),
                ]
                .concat(),
            ),
        ]
        .concat(),
    );
    let cuts = split(&data).expect("cut");
    assert_eq!(cuts.len(), 1);
    let resource: Vec<u8> = cuts[0]
        .resource_parts
        .iter()
        .flat_map(|&r| text(&data, r).to_vec())
        .collect();
    assert_eq!(resource, [ld(1, b"res"), group(7, b"")].concat());
    let sc = &cuts[0].scopes[0];
    let scope_fields: Vec<u8> = sc
        .scope_parts
        .iter()
        .flat_map(|&r| text(&data, r).to_vec())
        .collect();
    assert_eq!(
        scope_fields,
        [scope, group(9, &[tag(3, 0), vec![0]].concat())].concat()
    );
    let names: Vec<&[u8]> = sc.spans.iter().map(|s| text(&data, s.name)).collect();
    assert_eq!(names, [b"a".as_slice(), b"b"]);
    assert_eq!(
        text(&data, sc.spans[1].record),
        ld(2, &span(3, b"b")).as_slice()
    );
}

#[test]
fn a_record_with_a_padded_tag_is_named_not_lost() {
    let body = span(1, b"a");
    let data = ld(
        1,
        &ld(
            2,
            &[padded(2 << 3 | 2, 2), varint(body.len() as u64), body].concat(),
        ),
    );
    let err = split(&data).err().expect("refused");
    assert!(err.0.contains("overlong tag"), "{}", err.0);
    assert!(split_logs(&data).is_err());
}

#[test]
fn log_records_are_cut_with_their_heads() {
    // The last value of a field wins, as in a parser; other wire types are not the field.
    let record = [
        ld(9, &[1; 16]),
        ld(10, &[2; 8]),
        ld(12, b"first"),
        ld(12, b"gen_ai.user.message"),
        tag(9, 0),
        vec![5],
        group(20, b""),
    ]
    .concat();
    let other = ld(5, &ld(1, b"body"));
    let data = ld(
        1,
        &[
            ld(1, b"res"),
            ld(
                2,
                &[ld(1, b"scope"), ld(2, &record), ld(2, &other)].concat(),
            ),
        ]
        .concat(),
    );
    let cuts = split_logs(&data).expect("cut");
    let recs = &cuts[0].scopes[0].spans;
    assert_eq!(recs.len(), 2);
    assert_eq!(text(&data, recs[0].trace_id), [1; 16]);
    assert_eq!(text(&data, recs[0].span_id), [2; 8]);
    assert_eq!(text(&data, recs[0].event_name), b"gen_ai.user.message");
    assert_eq!(text(&data, recs[0].record), ld(2, &record).as_slice());
    assert_eq!(
        (recs[1].trace_id, recs[1].span_id, recs[1].event_name),
        ((0, 0), (0, 0), (0, 0))
    );
    assert!(split_logs(&data[..data.len() - 1]).is_err());
}
