#ifndef P4INA_INGRESS_P4
#define P4INA_INGRESS_P4

// Classifies the packet, hands it to aggregation or forwarding, and counts every drop by job and reason.
control P4inaIngress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    counter(MAX_JOBS * NUM_DROP_REASONS, CounterType.packets_and_bytes) drops;

    Aggregation() aggregation;
    Ipv4Forwarding() forwarding;

    apply {
        if (standard_metadata.parser_error != error.NoError) {
            meta.drop_reason = DROP_MALFORMED;
        } else if (!hdr.ipv4.isValid()) {
            meta.drop_reason = DROP_NOT_IPV4;
        } else if (standard_metadata.checksum_error == 1) {
            meta.drop_reason = DROP_BAD_CHECKSUM;
        } else if (hdr.agg.isValid()) {
            aggregation.apply(hdr, meta, standard_metadata);
        } else {
            forwarding.apply(hdr, meta, standard_metadata);
        }
        if (meta.drop_reason != DROP_NONE) {
            drops.count((bit<32>)meta.job_index * NUM_DROP_REASONS + (bit<32>)meta.drop_reason);
            mark_to_drop(standard_metadata);
        }
    }
}

#endif
