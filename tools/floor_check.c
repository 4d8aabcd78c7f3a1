/* The main of meson.build's floor_check_<floor> programs: each links the
 * whole of one floor's library against the floors below it only, so any
 * call from that floor upward, or into a sibling floor, fails to link. */
int main(void) { return 0; }
