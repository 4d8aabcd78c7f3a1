/* The YAML config loader (formats/config.c): any bytes as a config file,
 * and as the value of one --set.  An accepted file must survive the round
 * trip through the resolved YAML that every run stores. */
#include "fuzz.h"

#include "../formats/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    ar_config c, back;
    ar_err e = {{0}};
    ar_config_defaults(&c);
    if (ar_config_load(&c, path, &e) != 0) {
        fuzz_check_message(&e, path);
    } else {
        (void)ar_config_validate(&c, &e);
        char *yaml = ar_config_to_yaml(&c);
        ar_config_defaults(&back);
        FUZZ_CHECK(ar_config_parse(&back, yaml, strlen(yaml), "resolved", &e) == 0,
                   "the resolved YAML of an accepted file does not parse: %s\n%s", e.msg, yaml);
        char *again = ar_config_to_yaml(&back);
        FUZZ_CHECK(strcmp(yaml, again) == 0, "the resolved YAML does not round-trip:\n%s\n---\n%s", yaml, again);
        free(yaml);
        free(again);
    }

    /* The same bytes as one --set assignment (up to the first NUL). */
    char *assign = malloc(size + 1);
    memcpy(assign, data, size);
    assign[size] = '\0';
    ar_config_defaults(&c);
    e.msg[0] = '\0';
    if (ar_config_set(&c, assign, &e) != 0)
        FUZZ_CHECK(e.msg[0] != '\0', "a rejected --set without a message");
    free(assign);
    return 0;
}
