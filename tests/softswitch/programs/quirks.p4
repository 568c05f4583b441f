// Interpreter test: constructs p4c emits that BMv2 runs and the embedded switch once refused
// (issue 14, item 9): const entries with value bits outside their mask or prefix (p4c keeps them,
// BMv2 masks them), a table keyed on an `error`, a switch on action_run nested in another, a key
// of a @p4runtime_translation type, a table p4c drops as unreachable while P4Info keeps it, and
// a header assigned from a `?:` of two headers inside an action (where p4c keeps the `?:`).
#include <core.p4>
#include <v1model.p4>

// translated for the controller: P4Info gives 32 bits, the data plane has 16
@p4runtime_translation("p4ina.test/tag_id", 32)
type bit<16> wire_tag_t;

header probe_h {
    bit<8>     tern;
    bit<32>    addr;
    bit<8>     sel;
    bit<8>     pick;      // chooses which of two headers is copied into `chosen`
    wire_tag_t tag;
    bit<8>     tern_out;
    bit<8>     lpm_out;
    bit<8>     err_out;
    bit<8>     path_out;
    bit<8>     tag_out;
}

header pair_h { bit<16> v; }

struct headers_t {
    probe_h p;
    pair_h  first;
    pair_h  second;
    pair_h  chosen;
}

struct metadata_t { }

parser QParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.p);
        packet.extract(hdr.first);
        packet.extract(hdr.second);
        transition accept;
    }
}

control QVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control QIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    action set_tern(bit<8> v) { hdr.p.tern_out = v; }
    action set_lpm(bit<8> v) { hdr.p.lpm_out = v; }
    action set_err(bit<8> v) { hdr.p.err_out = v; }
    action set_tag(bit<8> v) { hdr.p.tag_out = v; }
    action path_a() { hdr.p.path_out = hdr.p.path_out | 8w1; }
    action path_b() { hdr.p.path_out = hdr.p.path_out | 8w2; }
    action path_c() { hdr.p.path_out = hdr.p.path_out | 8w4; }
    action choose() { hdr.chosen = hdr.p.pick == 8w0 ? hdr.first : hdr.second; }

    table t_tern {
        key = { hdr.p.tern: ternary @name("tern"); }
        actions = { set_tern; }
        const entries = {
            8w0x13 &&& 8w0xF0 : set_tern(1);   // 0x03 is outside the mask
            8w0x2F &&& 8w0x0F : set_tern(2);   // 0x20 is outside the mask
        }
        default_action = set_tern(0xEE);
    }
    table t_lpm {
        key = { hdr.p.addr: lpm @name("addr"); }
        actions = { set_lpm; }
        const entries = {
            32w0x0A0B0C0D &&& 32w0xFF000000 : set_lpm(3);   // beyond the /8 prefix
        }
        default_action = set_lpm(0xEE);
    }
    table t_err {
        key = { standard_metadata.parser_error: exact @name("parser_error"); }
        actions = { set_err; }
        default_action = set_err(0xEE);
    }
    table t_tag {
        key = { hdr.p.tag: exact @name("tag"); }
        actions = { set_tag; }
        default_action = set_tag(0xEE);
    }
    table t_outer {
        key = { hdr.p.sel: exact @name("sel"); }
        actions = { path_a; path_b; }
        default_action = path_a();
    }
    table t_inner {
        key = { hdr.p.tern: exact @name("tern"); }
        actions = { path_b; path_c; }
        default_action = path_c();
    }
    table t_innermost {
        key = { hdr.p.sel: exact @name("sel"); }
        actions = { path_c; }
        default_action = path_c();
    }
    table t_unreachable {
        key = { hdr.p.sel: exact @name("sel"); }
        actions = { path_c; }
        default_action = path_c();
    }

    apply {
        bit<8> never = 8w0;
        t_tern.apply();
        t_lpm.apply();
        t_err.apply();
        t_tag.apply();
        switch (t_outer.apply().action_run) {
            path_a: {
                switch (t_inner.apply().action_run) {
                    path_b: { t_innermost.apply(); }
                }
            }
        }
        if (never == 8w1) {
            t_unreachable.apply();   // p4c drops it from the BMv2 JSON; P4Info still lists it
        }
        choose();
        standard_metadata.egress_spec = 9w1;
    }
}

control QEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control QCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control QDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.p);
        packet.emit(hdr.chosen);
    }
}

V1Switch(QParser(), QVerify(), QIngress(), QEgress(), QCompute(), QDeparser()) main;
