// Interpreter test: lane loops. Sixteen lanes treated alike, as p4ina's accumulate, store, load and
// widen treat theirs, so that the C engine rolls each action's sixteen unrolled copies back into one
// loop (emulation/softswitch/reroll.py). The cell index comes from the packet and is out of range for
// half of its values (the registers have 8 cells), so both the loop's checked-once fast path and its
// per-lane checked path run; `keep` chooses between overwrite and add, as p4ina's first contribution
// of a round does; the overflow flag every lane may set comes back in the packet.
#include <core.p4>
#include <v1model.p4>

#define LANES(X) X(00) X(01) X(02) X(03) X(04) X(05) X(06) X(07) X(08) X(09) X(10) X(11) X(12) X(13) X(14) X(15)

header ctl_h {
    bit<8> op;     // 0 accumulate, 1 store, 2 load, 3 widen then accumulate
    bit<8> cell;   // the registers' cell (8 cells: 8..255 are out of range)
    bit<8> keep;   // 0: overwrite the cell (the round's first contribution); else add to it
    bit<8> overflow;
}

#define FIELD32(k) bit<32> v##k;
header lanes_h { LANES(FIELD32) }
#define FIELD16(k) bit<16> n##k;
header narrow_h { LANES(FIELD16) }

struct headers_t {
    ctl_h    ctl;
    lanes_h  lanes;
    narrow_h narrow;
}

struct metadata_t {
    bit<32> cell;
    bit<32> keep;
    bit<32> scratch_a;
    bit<32> scratch_b;
    bit<1>  overflow;
}

parser LParser(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ctl);
        pkt.extract(hdr.lanes);
        pkt.extract(hdr.narrow);
        transition accept;
    }
}

control LVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control LIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
#define REGISTER(k) register<bit<32>>(8) lane_##k;
    LANES(REGISTER)

#define ACCUMULATE(k) \
    lane_##k.read(meta.scratch_a, meta.cell); \
    meta.scratch_a = meta.scratch_a & meta.keep; \
    meta.scratch_b = (bit<32>)((int<32>)meta.scratch_a |+| (int<32>)hdr.lanes.v##k); \
    meta.overflow = (meta.scratch_b != meta.scratch_a + hdr.lanes.v##k) ? 1w1 : meta.overflow; \
    lane_##k.write(meta.cell, meta.scratch_b); \
    hdr.lanes.v##k = meta.scratch_b;
    action accumulate() { LANES(ACCUMULATE) }

#define STORE(k) lane_##k.write(meta.cell, hdr.lanes.v##k);
    action store() { LANES(STORE) }

#define LOAD(k) lane_##k.read(hdr.lanes.v##k, meta.cell);
    action load() { LANES(LOAD) }

#define WIDEN(k) hdr.lanes.v##k = (bit<32>)((int<32>)((int<16>)hdr.narrow.n##k));
    action widen() { LANES(WIDEN) }

    apply {
        sm.egress_spec = 1;
        if (!hdr.lanes.isValid() || !hdr.narrow.isValid()) {
            return;  // a short packet: fields of invalid headers are undefined (BMv2 keeps stale values)
        }
        meta.cell = (bit<32>)hdr.ctl.cell;
        meta.keep = hdr.ctl.keep == 0 ? 32w0 : 32w0xffffffff;
        if (hdr.ctl.op == 1) {
            store();
        } else if (hdr.ctl.op == 2) {
            load();
        } else {
            if (hdr.ctl.op == 3) {
                widen();
            }
            accumulate();
        }
        hdr.ctl.overflow = (bit<8>)meta.overflow;
    }
}

control LEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control LCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control LDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ctl);
        pkt.emit(hdr.lanes);
        pkt.emit(hdr.narrow);
    }
}

V1Switch(LParser(), LVerify(), LIngress(), LEgress(), LCompute(), LDeparser()) main;
