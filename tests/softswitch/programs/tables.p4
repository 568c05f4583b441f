// Interpreter test: exact, lpm, ternary (priorities) and range tables, default actions
// (const and not), const entries, hit/miss and switch(action_run) control flow.
#include <core.p4>
#include <v1model.p4>

header probe_h {
    bit<16> key16;
    bit<32> addr;
    bit<8>  tern;
    bit<16> port;
    bit<8>  hits;      // bit per table that hit
    bit<8>  exact_out;
    bit<8>  lpm_out;
    bit<8>  tern_out;
    bit<8>  range_out;
    bit<8>  const_out;
    bit<8>  path;
}

struct headers_t {
    probe_h p;
}

struct metadata_t { }

parser TParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.p);
        transition accept;
    }
}

control TVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control TIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    action set_exact(bit<8> v) { hdr.p.exact_out = v; }
    action set_lpm(bit<8> v) { hdr.p.lpm_out = v; }
    action set_tern(bit<8> v) { hdr.p.tern_out = v; }
    action set_range(bit<8> v) { hdr.p.range_out = v; }
    action set_const(bit<8> v) { hdr.p.const_out = v; }
    action miss_exact() { hdr.p.exact_out = 8w0xEE; }
    action path_a() { hdr.p.path = 8w1; }
    action path_b() { hdr.p.path = 8w2; }

    table t_exact {
        key = { hdr.p.key16: exact @name("key16"); hdr.p.tern: exact @name("tern"); }
        actions = { set_exact; miss_exact; }
        default_action = miss_exact();
        size = 4;
    }
    table t_lpm {
        key = { hdr.p.addr: lpm @name("addr"); }
        actions = { set_lpm; NoAction; }
        default_action = set_lpm(8w0xDD);
    }
    table t_tern {
        key = { hdr.p.tern: ternary @name("tern"); hdr.p.key16: exact @name("key16"); }
        actions = { set_tern; NoAction; }
        const default_action = NoAction();
    }
    table t_range {
        key = { hdr.p.port: range @name("port"); }
        actions = { set_range; NoAction; }
        default_action = NoAction();
    }
    table t_const {
        key = { hdr.p.tern: ternary @name("tern"); }
        actions = { set_const; }
        const default_action = set_const(8w0xCC);
        const entries = {
            8w0x10 &&& 8w0xF0 : set_const(8w1);
            8w0x12 &&& 8w0xFF : set_const(8w2);   // listed later: lower priority than 0x10/0xF0
            8w0x00 &&& 8w0x00 : set_const(8w3);
        }
    }
    table t_switch {
        key = { hdr.p.key16: exact @name("key16"); }
        actions = { path_a; path_b; }
        default_action = path_b();
    }

    apply {
        if (t_exact.apply().hit) {
            hdr.p.hits = hdr.p.hits | 8w1;
        }
        if (t_lpm.apply().hit) {
            hdr.p.hits = hdr.p.hits | 8w2;
        }
        if (t_tern.apply().hit) {
            hdr.p.hits = hdr.p.hits | 8w4;
        }
        if (t_range.apply().hit) {
            hdr.p.hits = hdr.p.hits | 8w8;
        }
        t_const.apply();
        switch (t_switch.apply().action_run) {
            path_a: { hdr.p.path = hdr.p.path + 8w10; }
            path_b: { hdr.p.path = hdr.p.path + 8w20; }
        }
        standard_metadata.egress_spec = 9w2;
    }
}

control TEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control TCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control TDeparser(packet_out packet, in headers_t hdr) {
    apply { packet.emit(hdr.p); }
}

V1Switch(TParser(), TVerify(), TIngress(), TEgress(), TCompute(), TDeparser()) main;
