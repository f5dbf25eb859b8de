# control/rank: what a rank process serves of its own (eep-rank): its counters, their Prometheus
# text and the /metrics endpoint (libmicrohttpd, through control/tool/http_page.c, which
# libeepd.a holds too: the two programs that serve pages), and its knobs.
#
#   $(BUILD)/lib/libeep_rank.a  link with $(LIBUTIL_A) and $(RANK_LDLIBS)
RANK_SRCS   := control/rank/rank_metrics.c control/rank/rank_metrics_http.c \
               control/rank/rank_knobs.c control/tool/http_page.c
LIBEEP_RANK_A := $(BUILD)/lib/libeep_rank.a
RANK_LDLIBS    = -lmicrohttpd -lpthread
TOOLS += $(LIBEEP_RANK_A)

$(LIBEEP_RANK_A): $(patsubst %.c,$(BUILD)/%.o,$(RANK_SRCS))
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^
