// Interpreter test: header stack operations (issue 14, item 9): push_front/pop_front (P4_16
// semantics, as BMv2 is built: the freed elements become invalid), copying a whole stack, and a
// stack indexed by constants after the shifts.
#include <core.p4>
#include <v1model.p4>

const bit<8> OP_PUSH = 8w1;
const bit<8> OP_POP = 8w2;
const bit<8> OP_COPY = 8w3;

header cmd_h {
    bit<8> op;
    bit<8> count;   // 1 or 2
}

header item_h { bit<8> v; }

header report_h {
    bit<8> valid_bits;   // bit i: items[i] valid after the operation
}

struct headers_t {
    cmd_h     cmd;
    item_h[3] items;
    item_h[3] copy;
    report_h  report;
}

struct metadata_t { }

parser SParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.cmd);
        packet.extract(hdr.items.next);
        packet.extract(hdr.items.next);
        transition accept;
    }
}

control SVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control SIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        // (fields of an invalid header hold whatever BMv2's recycled state had: read them only when valid)
        if (!hdr.cmd.isValid()) {
            // a packet too short for its command: nothing to do
        } else if (hdr.cmd.op == OP_PUSH) {
            if (hdr.cmd.count == 2) { hdr.items.push_front(2); } else { hdr.items.push_front(1); }
            hdr.items[0].setValid();
            hdr.items[0].v = 8w0x77;
        } else if (hdr.cmd.op == OP_POP) {
            if (hdr.cmd.count == 2) { hdr.items.pop_front(2); } else { hdr.items.pop_front(1); }
        } else if (hdr.cmd.op == OP_COPY) {
            hdr.copy = hdr.items;
        }
        bit<8> bits = 0;
        if (hdr.items[0].isValid()) { bits = bits | 8w1; }
        if (hdr.items[1].isValid()) { bits = bits | 8w2; }
        if (hdr.items[2].isValid()) { bits = bits | 8w4; }
        hdr.report.setValid();
        hdr.report.valid_bits = bits;
        standard_metadata.egress_spec = 9w1;
    }
}

control SEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control SCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control SDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.report);
        packet.emit(hdr.cmd);
        packet.emit(hdr.items);
        packet.emit(hdr.copy);
    }
}

V1Switch(SParser(), SVerify(), SIngress(), SEgress(), SCompute(), SDeparser()) main;
