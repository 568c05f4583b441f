// Interpreter test: verify_checksum whose target header may be invalid (issue 14, item 6).
// BMv2 (since p4lang/behavioral-model#377, so also 1.15.5) skips the verification of a checksum
// whose target field's header is invalid, and so does the embedded switch: checksum_error stays 0.
#include <core.p4>
#include <v1model.p4>

const bit<8> MARK_CHECKED = 8w0xFF;  // first byte: a checked_h follows

header checked_h {
    bit<8>  a;
    bit<8>  b;
    bit<16> csum;
}

header report_h { bit<8> checksum_error; }

struct headers_t {
    report_h  report;
    checked_h checked;
}

struct metadata_t { }

parser CParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        transition select(packet.lookahead<bit<8>>()) {
            MARK_CHECKED: parse_checked;
            default: accept;
        }
    }
    state parse_checked {
        packet.extract(hdr.checked);
        transition accept;
    }
}

control CVerify(inout headers_t hdr, inout metadata_t meta) {
    apply {
        // condition true: only the target header's validity decides whether BMv2 verifies
        verify_checksum(true, { hdr.checked.a, hdr.checked.b }, hdr.checked.csum, HashAlgorithm.csum16);
    }
}

control CIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.report.setValid();
        hdr.report.checksum_error = (bit<8>)standard_metadata.checksum_error;
        standard_metadata.egress_spec = 9w1;
    }
}

control CEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control CCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control CDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.report);
        packet.emit(hdr.checked);
    }
}

V1Switch(CParser(), CVerify(), CIngress(), CEgress(), CCompute(), CDeparser()) main;
