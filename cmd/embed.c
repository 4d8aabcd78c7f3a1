/* Build-time generator: files as C string constants, so that what attnres
 * shows or uses is compiled in exactly as it is shipped.
 *   embed OUT.c PAGE.1 [PAGE.5 ...]     the man page table of cmds.h
 *                                       (`attnres help CMD` from any directory)
 *   embed --string OUT.c SYMBOL FILE    const char SYMBOL[] = FILE's text
 *                                       (configs/scaling.yaml, sweep's built-in grid) */
#include <stdio.h>
#include <string.h>

/* The bytes of in as the body of a C string literal, one source line per line. */
static void put_literal(FILE *out, FILE *in)
{
    int c;
    while ((c = fgetc(in)) != EOF) {
        if (c == '\n')
            fputs("\\n\"\n\"", out);
        else if (c == '\\' || c == '"')
            fprintf(out, "\\%c", c);
        else if (c < 32 || c > 126)
            fprintf(out, "\\%03o", c);
        else
            fputc(c, out);
    }
}

static int embed_string(const char *outp, const char *sym, const char *inp)
{
    FILE *in = fopen(inp, "rb");
    if (!in)
        return 1;
    FILE *out = fopen(outp, "w");
    if (!out)
        return 1;
    fprintf(out, "/* generated from %s */\nconst char %s[] =\n\"", inp, sym);
    put_literal(out, in);
    fprintf(out, "\";\n");
    fclose(in);
    return fclose(out) != 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--string") == 0)
        return embed_string(argv[2], argv[3], argv[4]);
    if (argc < 2)
        return 2;
    FILE *out = fopen(argv[1], "w");
    if (!out)
        return 1;
    fprintf(out, "#include \"cmds.h\"\nconst cli_man_page cli_man_pages[] = {\n");
    for (int i = 2; i < argc; i++) {
        FILE *in = fopen(argv[i], "rb");
        if (!in)
            return 1;
        const char *base = strrchr(argv[i], '/');
        base = base ? base + 1 : argv[i];
        const char *dot = strrchr(base, '.');
        fprintf(out, "{\"%.*s\", \"", (int)(dot ? dot - base : (long)strlen(base)), base);
        put_literal(out, in);
        fprintf(out, "\"},\n");
        fclose(in);
    }
    fprintf(out, "};\nconst int cli_n_man_pages = %d;\n", argc - 2);
    return fclose(out) != 0;
}
