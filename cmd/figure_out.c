/* What the figure commands (plot, plot-depth-attn) share on the command
 * line: --format, and the default output path inside a run directory. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmds.h"

int cli_parse_format(const char *usage, const char *v, ar_fig_format *f)
{
    if (ar_fig_format_parse(v, f) == 0)
        return 0;
    cli_usage_error(usage, "'--format' expects png, svg or pdf, got '%s'", v);
    return -1;
}

void cli_figure_path(const char *run, const char *stem, ar_fig_format f, char *out, size_t cap)
{
    struct stat st;
    const char *ext = ar_fig_format_ext(f == AR_FIG_AUTO ? AR_FIG_PNG : f);
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, cap, "%s/%s%s", run, stem, ext);
        return;
    }
    const char *slash = strrchr(run, '/');
    if (slash)
        snprintf(out, cap, "%.*s/%s%s", (int)(slash - run), run, stem, ext);
    else
        snprintf(out, cap, "%s%s", stem, ext);
}
