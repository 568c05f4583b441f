// Interpreter test: header stacks (extract into .next, select on .last, constant indexes,
// StackOutOfBounds) and header unions (one member valid at a time).
#include <core.p4>
#include <v1model.p4>

header tag_h {
    bit<8> kind;
    bit<8> value;
}

header a_h { bit<16> x; }
header b_h { bit<32> y; }

header_union ab_u {
    a_h a;
    b_h b;
}

header out_h {
    bit<32> parser_error;
    bit<8>  tags_valid;    // bit i: tags[i] valid
    bit<8>  tag1_value;
    bit<8>  which;         // 1: a, 2: b, 0: neither
    bit<8>  union_valid;
}

struct headers_t {
    out_h    report;
    tag_h[3] tags;
    ab_u     ab;
}

struct metadata_t { }

parser SParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.tags.next);
        transition select(hdr.tags.last.kind) {
            8w0: parse_union;
            default: start;
        }
    }
    state parse_union {
        transition select(packet.lookahead<bit<8>>()) {
            8w0xAA: parse_a;
            default: parse_b;
        }
    }
    state parse_a {
        packet.extract(hdr.ab.a);
        transition accept;
    }
    state parse_b {
        packet.extract(hdr.ab.b);
        transition accept;
    }
}

control SVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control SIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.report.setValid();
        // errors cannot be cast to bits: 0 none, 1 PacketTooShort, 3 StackOutOfBounds, 255 other
        if (standard_metadata.parser_error == error.NoError) {
            hdr.report.parser_error = 0;
        } else if (standard_metadata.parser_error == error.PacketTooShort) {
            hdr.report.parser_error = 1;
        } else if (standard_metadata.parser_error == error.StackOutOfBounds) {
            hdr.report.parser_error = 3;
        } else {
            hdr.report.parser_error = 255;
        }
        bit<8> v = 0;
        if (hdr.tags[0].isValid()) { v = v | 8w1; }
        if (hdr.tags[1].isValid()) { v = v | 8w2; hdr.report.tag1_value = hdr.tags[1].value; }
        if (hdr.tags[2].isValid()) { v = v | 8w4; }
        hdr.report.tags_valid = v;
        if (hdr.ab.a.isValid()) {
            hdr.report.which = 1;
            // making b valid invalidates a: only b is emitted
            hdr.ab.b.setValid();
            hdr.ab.b.y = 32w0x01020304;
        } else if (hdr.ab.b.isValid()) {
            hdr.report.which = 2;
        }
        hdr.report.union_valid = hdr.ab.isValid() ? 8w1 : 8w0;
        standard_metadata.egress_spec = 9w1;
    }
}

control SEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control SCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control SDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.report);
        packet.emit(hdr.tags);
        packet.emit(hdr.ab);
    }
}

V1Switch(SParser(), SVerify(), SIngress(), SEgress(), SCompute(), SDeparser()) main;
