#ifndef P4INA_PARSER_P4
#define P4INA_PARSER_P4

error {
    AggBadVersion,
    AggBadElemType
}

// On any parser error simple_switch does not drop by itself: it sets
// standard_metadata.parser_error and runs ingress, which drops and counts it.
parser P4inaParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        // Options are left unparsed (they ride along as payload); only
        // option-free UDP can carry aggregation packets.
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4w5, 13w0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            UDP_PORT_AGG: parse_agg;
            default: accept;
        }
    }

    state parse_agg {
        packet.extract(hdr.agg);
        verify(hdr.agg.version == AGG_VERSION, error.AggBadVersion);
        transition select(hdr.agg.elem_type) {
            ELEM_INT32: parse_lanes32;
            ELEM_INT16: parse_lanes16;
            ELEM_INT8: parse_lanes8;
            ELEM_NONE: accept;   // an exponent round carries no lanes
            default: parse_bad_elem_type;
        }
    }

    state parse_bad_elem_type {
        verify(false, error.AggBadElemType);
        transition accept;
    }

    state parse_lanes32 {
        packet.extract(hdr.lanes32);
        transition accept;
    }

    state parse_lanes16 {
        packet.extract(hdr.lanes16);
        transition accept;
    }

    state parse_lanes8 {
        packet.extract(hdr.lanes8);
        transition accept;
    }
}

control P4inaDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.agg);
        packet.emit(hdr.lanes32);
        packet.emit(hdr.lanes16);
        packet.emit(hdr.lanes8);
    }
}

#endif
