/*
 * ep_sm_model.c - the SM bandwidth model of dispatch/combine and the choice of senders from it.
 *
 * Pure arithmetic on a shape and the device's SM count (no GPU), so tests check it on the CPU.
 */
#include "elastic/ep/ep_sm_model.h"

#include <math.h>

#include "elastic/ep/ep_knobs.h"

double eep_ep_expected_groups(int num_experts, int num_topk, int groups)
{
    double miss = 1.0; /* P(no expert of one given group): C(E - E/G, K) / C(E, K) */
    int    per_group, i;

    if (groups < 1 || num_experts < groups || num_topk < 1 || num_topk > num_experts) {
        return 0.0;
    }
    per_group = num_experts / groups;
    for (i = 0; i < num_topk; i++) {
        double num = (double)(num_experts - per_group - i);

        if (num <= 0.0) {
            miss = 0.0;
            break;
        }
        miss *= num / (double)(num_experts - i);
    }
    return groups * (1.0 - miss);
}

void eep_ep_sm_model_init(eep_ep_sm_model_t *m, int world, int hidden, eep_dtype_t dtype,
                          int num_topk, int num_experts, int device_sms)
{
    m->world                = world;
    m->hidden               = hidden;
    m->dtype                = dtype;
    m->num_topk             = num_topk;
    m->num_experts          = num_experts;
    m->device_sms           = device_sms;
    m->link_gbps            = EEP_EP_DEFAULT_LINK_GBPS;
    m->sm_read_gbps         = EEP_EP_SM_READ_GBPS;
    m->sm_write_gbps        = EEP_EP_SM_WRITE_GBPS;
    m->token_overhead_bytes = EEP_EP_TOKEN_OVERHEAD_B;
    m->margin               = EEP_EP_SM_MARGIN;
    m->min_sms              = EEP_EP_MIN_SMS;
}

int eep_ep_sm_model_run(const eep_ep_sm_model_t *m, eep_ep_sm_estimate_t *est_p)
{
    eep_ep_sm_estimate_t est   = { 0 };
    eep_ep_shape_t       shape = {
              .world       = m->world,
              .max_tokens  = 1,
              .hidden      = m->hidden,
              .num_topk    = m->num_topk,
              .num_experts = m->num_experts,
              .alignment   = 1,
              .dtype       = m->dtype,
    };
    eep_ep_wire_t wire;
    double        sms;
    int           n;

    if (eep_ep_shape_check(&shape, NULL) != EEP_OK || m->device_sms < 1 || m->link_gbps <= 0.0 ||
        m->sm_read_gbps <= 0.0 || m->sm_write_gbps <= 0.0 || m->token_overhead_bytes < 0.0 ||
        m->margin < 1.0 || m->min_sms < 1) {
        return -1;
    }
    eep_ep_wire_layout(&shape, &wire);
    est.token_bytes       = (double)wire.token_bytes;
    est.distinct_ranks    = eep_ep_expected_groups(m->num_experts, m->num_topk, m->world);
    est.per_sm_write_gbps = m->sm_write_gbps * est.token_bytes /
                            (est.token_bytes + m->token_overhead_bytes);
    if (m->world == 1) {
        /* No link traffic: the senders store only each token's metadata and tag (the copy blocks
           read its hidden bytes from x), so they need few SMs and the copy blocks, which write
           the expert-major rows (HBM-bound), want the rest.  An eighth of the device: on an H200
           (16 + 116) within 6% of the best split from T 32 to 4096 in every mode (RESULTS,
           "one rank"); all SMs as senders left one copy block, 13.6 ms at T 4096. */
        n = m->device_sms / EEP_EP_LOCAL_SEND_SHARE;
    } else {
        est.write_gbps = m->link_gbps / (1.0 - 1.0 / m->world);
        est.read_gbps  = est.write_gbps / est.distinct_ranks;
        sms            = m->margin *
              fmax(est.write_gbps / est.per_sm_write_gbps, est.read_gbps / m->sm_read_gbps);
        n = (int)ceil(sms);
        n += n & 1;
        if (n < m->min_sms) {
            n = m->min_sms;
        }
    }
    /* at most half the device: the copy blocks are the rest (elastic/ep/ep.c) */
    if (n > m->device_sms / 2) {
        n = m->device_sms / 2;
    }
    n           = n < 1 ? 1 : n;
    est.num_sms = n;
    if (est_p != NULL) {
        *est_p = est;
    }
    return n;
}

int eep_ep_pick_sms(const eep_ep_config_t *cfg, const eep_ep_shape_t *shape, int device_sms,
                    double link_gbps, int requested)
{
    eep_ep_sm_model_t m;
    int               n;

    if (device_sms < 1 || eep_ep_shape_check(shape, NULL) != EEP_OK) {
        return -1;
    }
    if (requested > 0) {
        n = requested;
    } else if (cfg != NULL && cfg->num_sms > 0) {
        n = (int)cfg->num_sms;
    } else {
        eep_ep_sm_model_init(&m, shape->world, shape->hidden, shape->dtype, shape->num_topk,
                             shape->num_experts, device_sms);
        if (link_gbps > 0.0) {
            m.link_gbps = link_gbps;
        }
        if (cfg != NULL) {
            if (cfg->link_gbps > 0.0) {
                m.link_gbps = cfg->link_gbps;
            }
            m.sm_read_gbps         = cfg->sm_read_gbps;
            m.sm_write_gbps        = cfg->sm_write_gbps;
            m.token_overhead_bytes = cfg->token_overhead_bytes;
            m.margin               = cfg->sm_margin;
            m.min_sms              = (int)cfg->min_sms;
        }
        n = eep_ep_sm_model_run(&m, NULL);
        if (n < 0) {
            return -1;
        }
    }
    return n < 1 ? 1 : n > device_sms ? device_sms : n;
}

int eep_ep_usable_sms(int device_sms, int hybrid)
{
    if (hybrid && device_sms - EEP_EP_HYBRID_FREE_SMS >= 2) {
        return device_sms - EEP_EP_HYBRID_FREE_SMS;
    }
    return device_sms;
}

int eep_ep_shared_sms(int device_sms, int sharers)
{
    int share;

    if (sharers <= 1) {
        return device_sms;
    }
    share = device_sms / sharers;
    return share < 2 ? (device_sms < 2 ? device_sms : 2) : share;
}

int eep_ep_plan_sms(const eep_ep_config_t *cfg, const eep_ep_shape_t *shape, int device_sms,
                    double link_gbps, int requested, unsigned flags, int max_send,
                    eep_ep_sm_plan_t *plan)
{
    const int        cpu_sync = (flags & EEP_EP_PLAN_CPU_SYNC) != 0;
    eep_ep_config_t  model_cfg;
    eep_ep_sm_plan_t pl = { 0 };
    int              S, B, copy_knob;

    if (plan == NULL || max_send < 1 || requested < 0) {
        return -1;
    }
    device_sms = eep_ep_usable_sms(device_sms, (flags & EEP_EP_PLAN_HYBRID) != 0);
    /* The model's senders on the whole device (the budget knob is not a sender count here). */
    if (cfg != NULL) {
        model_cfg         = *cfg;
        model_cfg.num_sms = 0;
    }
    S = eep_ep_pick_sms(cfg != NULL ? &model_cfg : NULL, shape, device_sms, link_gbps, 0);
    if (S < 1) {
        return -1;
    }
    S         = S > max_send ? max_send : S;
    copy_knob = cfg != NULL && cfg->copy_sms > 0 ? (int)cfg->copy_sms : 0;
    B         = requested > 0 ? requested : cfg != NULL && cfg->num_sms > 0 ? (int)cfg->num_sms : 0;
    if (B == 0) {
        pl.send    = S;
        pl.copy    = copy_knob > 0 ? copy_knob : device_sms - S;
        pl.copy    = pl.copy < 1 ? 1 : pl.copy;
        pl.combine = pl.send + pl.copy;
        *plan      = pl;
        return 0;
    }
    B         = B > device_sms ? device_sms : B;
    B         = B < 2 ? 2 : B;
    pl.budget = B;
    if (cpu_sync) {
        pl.send = B - 1 < S ? B - 1 : S;
        pl.copy = copy_knob > 0 && copy_knob < B ? copy_knob : B;
    } else if (copy_knob > 0) {
        pl.copy = copy_knob < B - 1 ? copy_knob : B - 1;
        pl.send = B - pl.copy;
        pl.send = pl.send > max_send ? max_send : pl.send;
    } else if (flags & EEP_EP_PLAN_RANK_MAJOR) {
        /* one row a token: the copy is an eighth of expert-major's, the senders' work is not */
        pl.send = (int)floor((double)B / EEP_EP_RANK_MAJOR_SEND_SHARE + 0.5);
        pl.send = pl.send < 1 ? 1 : pl.send > B - 1 ? B - 1 : pl.send > S ? S : pl.send;
        pl.copy = B - pl.send;
    } else {
        pl.send = (int)floor((double)B * (double)S / (double)device_sms + 0.5);
        pl.send = pl.send < 1 ? 1 : pl.send > B - 1 ? B - 1 : pl.send > S ? S : pl.send;
        pl.copy = B - pl.send;
    }
    pl.combine = B;
    *plan      = pl;
    return 0;
}

int eep_ep_copy_engine_allowed(int knob, int budget, int device_sms)
{
    if (knob == 0) {
        return 0;
    }
    return knob == 2 || budget <= 0 || budget >= device_sms;
}
