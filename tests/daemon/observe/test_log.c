/* Tests daemon/log.c: logfmt quoting and whole lines. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "observe/log.h"

static void check_value(const char *in, const char *want) {
  char out[128];
  size_t n = reshard_log_format_value(out, sizeof out, in, strlen(in));
  cr_assert_str_eq(out, want);
  cr_assert_eq(n, strlen(want));
}

Test(log, values) {
  check_value("plain", "plain");
  check_value("127.0.0.1:50051", "127.0.0.1:50051");
  check_value("", "\"\"");
  check_value("two words", "\"two words\"");
  check_value("a=b", "\"a=b\"");
  check_value("say \"hi\"", "\"say \\\"hi\\\"\"");
  check_value("back\\slash", "\"back\\\\slash\"");
  check_value("line\nbreak", "\"line\\nbreak\"");
  check_value("bell\x01", "\"bell\\x01\"");
}

Test(log, value_truncation_reports_full_length) {
  char out[4];
  cr_assert_eq(reshard_log_format_value(out, sizeof out, "abcdef", 6), 6);
  cr_assert_str_eq(out, "abc");
}

Test(log, lines_and_levels) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  reshard_log_set_fd(fds[1]);
  reshard_log_set_level(RESHARD_LOG_INFO);
  reshard_log_line line;
  cr_assert(!reshard_log_begin(&line, RESHARD_LOG_DEBUG, "hidden"));
  cr_assert(reshard_log_begin(&line, RESHARD_LOG_WARN, "hello world"));
  reshard_log_str(&line, "error", "it broke");
  reshard_log_u64(&line, "count", 42);
  reshard_log_bool(&line, "ok", false);
  reshard_log_end(&line);
  reshard_log_set_fd(2);
  close(fds[1]);
  char text[512] = {0};
  ssize_t n = read(fds[0], text, sizeof text - 1);
  close(fds[0]);
  cr_assert_gt(n, 0);
  cr_assert_eq(strncmp(text, "ts=", 3), 0);
  cr_assert(strstr(text, "Z level=warn msg=\"hello world\" error=\"it broke\" "
                         "count=42 ok=false\n") != NULL,
            "%s", text);
}

Test(log, long_lines_are_cut_and_marked) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  reshard_log_set_fd(fds[1]);
  static char big[4000];
  memset(big, 'x', sizeof big - 1);
  reshard_log_line line;
  cr_assert(reshard_log_begin(&line, RESHARD_LOG_ERROR, "big"));
  reshard_log_str(&line, "first", "kept");
  reshard_log_str(&line, "blob", big);
  reshard_log_end(&line);
  reshard_log_set_fd(2);
  close(fds[1]);
  static char text[RESHARD_LOG_LINE_MAX + 1];
  ssize_t n = read(fds[0], text, sizeof text - 1);
  close(fds[0]);
  cr_assert_gt(n, 0);
  cr_assert_leq(n, RESHARD_LOG_LINE_MAX);
  cr_assert(strstr(text, "first=kept truncated=true\n") != NULL, "%s", text);
}

Test(log, level_names) {
  reshard_log_level level;
  cr_assert(reshard_log_level_parse("WARNING", &level));
  cr_assert_eq(level, RESHARD_LOG_WARN);
  cr_assert(!reshard_log_level_parse("trace", &level));
  cr_assert_str_eq(reshard_log_level_name(RESHARD_LOG_ERROR), "error");
}
