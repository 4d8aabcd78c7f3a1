/* Build-time generator: turns man pages into a C table so that
 * `attnres help CMD` works from any directory, installed or not.
 * usage: embed_man OUT.c PAGE.1 [PAGE.5 ...] */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
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
        fprintf(out, "\"},\n");
        fclose(in);
    }
    fprintf(out, "};\nconst int cli_n_man_pages = %d;\n", argc - 2);
    return fclose(out) != 0;
}
