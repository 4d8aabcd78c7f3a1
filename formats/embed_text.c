/* Build-time generator: turns a text file into a C string constant, so a
 * ready config (configs/scaling.yaml) is compiled into the library exactly
 * as it is shipped.
 * usage: embed_text OUT.c SYMBOL FILE */
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    FILE *in = fopen(argv[3], "rb");
    if (!in)
        return 1;
    FILE *out = fopen(argv[1], "w");
    if (!out)
        return 1;
    fprintf(out, "/* generated from %s */\nconst char %s[] =\n\"", argv[3], argv[2]);
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
    fprintf(out, "\";\n");
    fclose(in);
    return fclose(out) != 0;
}
