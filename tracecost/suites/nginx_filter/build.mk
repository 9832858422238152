# The nginx-filter suite's uebpf filter (uebpf_filter.py): the eBPF object, the rules loader, and
# the nginx module built against nginx-dev as Debian builds its own modules (its configure, with
# Debian's flags from conf_flags, --add-dynamic-module, `make modules`), in a copy of the headers'
# tree (configure writes a Makefile into the tree it runs in).
NGINX_DEV := /usr/share/nginx/src
NGINX_BUILD := $(BUILD)/nginx
NGINX_FILTER := tracecost/suites/nginx_filter
SUITE_PRODUCTS += $(BPF)/uebpf_filter.bpf.o $(BIN)/nginx-filter-rules
SUITE_PRODUCTS += $(NGINX_BUILD)/ngx_http_uebpf_filter_module.so $(NGINX_BUILD)/offsets.txt

$(BIN)/nginx-filter-rules: $(NGINX_FILTER)/filter_rules.c $(NGINX_FILTER)/uebpf_filter.h runtime/uebpf/include/uebpf.h | runtime $(BIN)
	$(CC) $(CFLAGS) -Iruntime/uebpf/include -o $@ $< -L$(LIB) -luebpf -Wl,-rpath,'$$ORIGIN/../lib'

$(NGINX_BUILD)/objs/Makefile: $(NGINX_FILTER)/config $(NGINX_FILTER)/build.mk $(NGINX_DEV)/conf_flags | runtime
	rm -rf $(NGINX_BUILD) && mkdir -p $(NGINX_BUILD) && cp -r $(NGINX_DEV) $(NGINX_BUILD)/tree
	cd $(NGINX_BUILD)/tree && . ./conf_flags && UEBPF_INCLUDE=$(abspath runtime/uebpf/include) \
	  UEBPF_LIB=$(abspath $(LIB)) ./configure "$${NGX_CONF_FLAGS[@]}" --with-cc-opt="-O2 -g -fno-omit-frame-pointer -fPIC" \
	  --with-ld-opt='-fPIC' --add-dynamic-module=$(abspath $(NGINX_FILTER)) \
	  --builddir=$(abspath $(NGINX_BUILD))/objs > $(abspath $(NGINX_BUILD))/configure.log

# Copied as a new file, not the old one rewritten: an nginx running it keeps its own (as the
# runtime's libraries are).
$(NGINX_BUILD)/ngx_http_uebpf_filter_module.so: $(NGINX_FILTER)/ngx_http_uebpf_filter_module.c \
  $(NGINX_FILTER)/uebpf_filter.h $(NGINX_BUILD)/objs/Makefile $(LIB)/libuebpf.a
	$(MAKE) -C $(NGINX_BUILD)/tree -f $(abspath $(NGINX_BUILD))/objs/Makefile modules
	cp --remove-destination $(NGINX_BUILD)/objs/ngx_http_uebpf_filter_module.so $@

NGINX_INCLUDES := $(addprefix -I$(NGINX_BUILD)/tree/src/,core event event/modules os/unix http http/modules http/v2) \
  -I$(NGINX_BUILD)/objs
$(NGINX_BUILD)/offsets.txt: $(NGINX_FILTER)/nginx_offsets.c $(NGINX_BUILD)/objs/Makefile
	$(CC) $(CFLAGS) $(NGINX_INCLUDES) -o $(NGINX_BUILD)/nginx_offsets $<
	$(NGINX_BUILD)/nginx_offsets > $@
