// Interpreter test: BMv2 arithmetic width rules (wrap-around, two's complement int<W>,
// shifts, casts, slices, concatenation, saturation, ?:, bool<->bit), an if/else inside
// an action (p4c emits _jump/_jump_if_zero), a register and an indirect counter.
#include <core.p4>
#include <v1model.p4>

header in_h {
    bit<8>  a;
    bit<8>  b;
    int<8>  sa;
    int<8>  sb;
    bit<16> c;
    bit<32> d;
}

header out_h {
    bit<8>  add;
    bit<8>  sub;
    bit<8>  mul;
    int<8>  sadd;
    int<8>  ssub;
    int<8>  sshr;
    bit<8>  shl;
    bit<8>  shr;
    bit<8>  band;
    bit<8>  bor;
    bit<8>  bxor;
    bit<8>  bnot;
    bit<8>  lt;
    bit<8>  slt;
    bit<8>  mux;
    bit<16> sext;
    bit<16> zext;
    bit<4>  hi_nibble;
    bit<4>  lo_nibble;
    bit<16> concat;
    bit<8>  usat_add;
    bit<8>  usat_sub;
    int<8>  ssat_add;
    bit<8>  branch;
    bit<8>  dyn_shl;
    bit<32> reg_old;
    bit<32> reg_new;
    bit<16> neg;
}

struct headers_t {
    in_h  inp;
    out_h res;
}

struct metadata_t {
    bit<8> tmp;
}

parser ArithParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.inp);
        transition accept;
    }
}

control ArithVerify(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control ArithIngress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    register<bit<32>>(4) acc;
    counter(4, CounterType.packets_and_bytes) seen;

    action branchy(bit<8> limit) {
        if (hdr.inp.a > limit) {
            hdr.res.branch = hdr.inp.a - limit;
        } else {
            hdr.res.branch = limit;
        }
    }

    action accumulate() {
        bit<32> old;
        acc.read(old, (bit<32>)hdr.inp.b[1:0]);
        hdr.res.reg_old = old;
        old = old + hdr.inp.d;
        acc.write((bit<32>)hdr.inp.b[1:0], old);
        hdr.res.reg_new = old;
        seen.count((bit<32>)hdr.inp.b[1:0]);
    }

    apply {
        if (!hdr.inp.isValid()) {
            mark_to_drop(standard_metadata);
            exit;
        }
        hdr.res.setValid();
        hdr.res.add = hdr.inp.a + hdr.inp.b;
        hdr.res.sub = hdr.inp.a - hdr.inp.b;
        hdr.res.mul = hdr.inp.a * hdr.inp.b;
        hdr.res.sadd = hdr.inp.sa + hdr.inp.sb;
        hdr.res.ssub = hdr.inp.sa - hdr.inp.sb;
        hdr.res.sshr = hdr.inp.sa >> 2;
        hdr.res.shl = hdr.inp.a << 3;
        hdr.res.shr = hdr.inp.a >> 3;
        hdr.res.band = hdr.inp.a & hdr.inp.b;
        hdr.res.bor = hdr.inp.a | hdr.inp.b;
        hdr.res.bxor = hdr.inp.a ^ hdr.inp.b;
        hdr.res.bnot = ~hdr.inp.a;
        hdr.res.lt = (bit<8>)(bit<1>)(hdr.inp.a < hdr.inp.b);
        hdr.res.slt = (hdr.inp.sa < hdr.inp.sb) ? 8w1 : 8w0;
        hdr.res.mux = (hdr.inp.c == 16w0) ? hdr.inp.a : hdr.inp.b;
        hdr.res.sext = (bit<16>)(int<16>)hdr.inp.sa;
        hdr.res.zext = (bit<16>)hdr.inp.a;
        hdr.res.hi_nibble = hdr.inp.c[15:12];
        hdr.res.lo_nibble = hdr.inp.c[3:0];
        hdr.res.concat = hdr.inp.a ++ hdr.inp.b;
        hdr.res.usat_add = hdr.inp.a |+| hdr.inp.b;
        hdr.res.usat_sub = hdr.inp.a |-| hdr.inp.b;
        hdr.res.ssat_add = hdr.inp.sa |+| hdr.inp.sb;
        meta.tmp = hdr.inp.b & 8w7;
        hdr.res.dyn_shl = hdr.inp.a << meta.tmp;
        hdr.res.neg = -hdr.inp.c;
        branchy(8w100);
        accumulate();
        standard_metadata.egress_spec = 9w1;
    }
}

control ArithEgress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    apply { }
}

control ArithCompute(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control ArithDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.inp);
        packet.emit(hdr.res);
    }
}

V1Switch(ArithParser(), ArithVerify(), ArithIngress(), ArithEgress(), ArithCompute(), ArithDeparser()) main;
