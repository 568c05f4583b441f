// Interpreter test: the packet replication engine. Ingress sets mcast_grp and a user
// metadata tag; each replica reports its egress_port, egress_rid, instance_type and the
// tag in egress; a replica with rid 99 is dropped in egress; group 0 means unicast.
#include <core.p4>
#include <v1model.p4>

header mc_h {
    bit<16> group;
    bit<16> port;
    bit<16> rid;
    bit<32> itype;
    bit<8>  tag;
    bit<8>  ingress_port;
    bit<32> length;
}

struct headers_t { mc_h m; }

struct metadata_t { bit<8> tag; }

parser MParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.m);
        transition accept;
    }
}

control MVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control MIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        meta.tag = 8w0xAB;
        hdr.m.ingress_port = (bit<8>)standard_metadata.ingress_port;
        // (a truncated packet has no valid header to read: BMv2 would read stale fields)
        if (!hdr.m.isValid() || hdr.m.group == 16w0xFFFF) {
            mark_to_drop(standard_metadata);
        } else if (hdr.m.group != 16w0) {
            standard_metadata.mcast_grp = hdr.m.group;
        } else {
            standard_metadata.egress_spec = (bit<9>)hdr.m.port;
        }
    }
}

control MEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    apply {
        hdr.m.port = (bit<16>)standard_metadata.egress_port;
        hdr.m.rid = standard_metadata.egress_rid;
        hdr.m.itype = standard_metadata.instance_type;
        hdr.m.tag = meta.tag;
        hdr.m.length = standard_metadata.packet_length;
        if (standard_metadata.egress_rid == 16w99) {
            mark_to_drop(standard_metadata);
        }
    }
}

control MCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control MDeparser(packet_out packet, in headers_t hdr) {
    apply { packet.emit(hdr.m); }
}

V1Switch(MParser(), MVerify(), MIngress(), MEgress(), MCompute(), MDeparser()) main;
