#include "perdure/schedules/cron.hpp"

#include <array>
#include <cctype>
#include <vector>

#include "perdure/error.hpp"

namespace perdure::schedules {

namespace {

using namespace std::chrono;

struct field_spec {
  const char* name;
  int min;
  int max;
  std::array<const char*, 12> names; // value min + i, or empty
};

constexpr field_spec second_field{"second", 0, 59, {}};
constexpr field_spec minute_field{"minute", 0, 59, {}};
constexpr field_spec hour_field{"hour", 0, 23, {}};
constexpr field_spec day_field{"day-of-month", 1, 31, {}};
constexpr field_spec month_field{
  "month",
  1,
  12,
  {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
   "NOV", "DEC"}};
constexpr field_spec weekday_field{
  "day-of-week", 0, 7, {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}};

[[noreturn]] void refuse(std::string_view text, const std::string& why) {
  throw perdure::error(errc::invalid_argument,
                       "cron '" + std::string{text} + "': " + why
                         + " (fields: [second] minute hour day-of-month "
                           "month day-of-week, e.g. '0 2 * * *' for 02:00 "
                           "daily, or @daily)");
}

/// A value of `f`: a number or (months, weekdays) a name.
int value_of(std::string_view text, const field_spec& f, std::string_view v) {
  if (v.empty())
    refuse(text, std::string{"a "} + f.name + " value is missing");
  if (std::isdigit(static_cast<unsigned char>(v.front()))) {
    int n = 0;
    for (char c : v) {
      if (!std::isdigit(static_cast<unsigned char>(c)))
        refuse(text, std::string{f.name} + " '" + std::string{v}
                       + "' is not a number");
      n = n * 10 + (c - '0');
      if (n > 1000)
        break;
    }
    if (n < f.min || n > f.max)
      refuse(text, std::string{f.name} + " " + std::string{v}
                     + " is out of range " + std::to_string(f.min) + "-"
                     + std::to_string(f.max));
    return n;
  }
  std::string upper;
  for (char c : v)
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (std::size_t i = 0; i < f.names.size(); ++i)
    if (f.names[i] && upper == f.names[i])
      return f.min + static_cast<int>(i);
  refuse(text, std::string{f.name} + " '" + std::string{v}
                 + "' is neither a number nor a name");
}

/// One field's values as bits (bit i = value i). Sets `star` when the
/// field begins with `*` or `?`.
template <std::size_t N>
std::bitset<N> parse_field(std::string_view text, const field_spec& f,
                           std::string_view field, bool* star = nullptr) {
  std::bitset<N> out;
  bool question_allowed = star != nullptr;
  if (star)
    *star = !field.empty() && (field.front() == '*' || field.front() == '?');
  while (true) {
    auto comma = field.find(',');
    auto item = field.substr(0, comma);
    if (item.empty())
      refuse(text, std::string{"an empty item in the "} + f.name + " field");
    int step = 1;
    bool stepped = false;
    if (auto slash = item.find('/'); slash != std::string_view::npos) {
      auto s = item.substr(slash + 1);
      item = item.substr(0, slash);
      if (s.empty()
          || s.find_first_not_of("0123456789") != std::string_view::npos
          || s.size() > 4)
        refuse(text, std::string{f.name} + " step '" + std::string{s}
                       + "' is not a whole number");
      step = std::stoi(std::string{s});
      stepped = true;
      if (step == 0)
        refuse(text, std::string{f.name} + " step 0 never advances");
    }
    int lo = f.min, hi = f.max;
    if (item == "*" || (item == "?" && question_allowed)) {
      // the whole range
    } else if (item == "?") {
      refuse(text, std::string{"'?' is only for the day fields, not "}
                     + f.name);
    } else if (auto dash = item.find('-'); dash != std::string_view::npos) {
      lo = value_of(text, f, item.substr(0, dash));
      hi = value_of(text, f, item.substr(dash + 1));
      if (lo > hi)
        refuse(text, std::string{f.name} + " range " + std::string{item}
                       + " runs backwards (write it as two ranges, e.g. "
                         "22-23,0-2)");
    } else {
      lo = value_of(text, f, item);
      // `5/20`: from 5 to the end of the range by 20.
      hi = stepped ? f.max : lo;
    }
    for (int v = lo; v <= hi; v += step)
      out.set(static_cast<std::size_t>(v == 7 && N == 7 ? 0 : v));
    if (comma == std::string_view::npos)
      break;
    field.remove_prefix(comma + 1);
  }
  return out;
}

std::string_view macro(std::string_view text) {
  std::string lower;
  for (char c : text)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "@yearly" || lower == "@annually")
    return "0 0 1 1 *";
  if (lower == "@monthly")
    return "0 0 1 * *";
  if (lower == "@weekly")
    return "0 0 * * 0";
  if (lower == "@daily" || lower == "@midnight")
    return "0 0 * * *";
  if (lower == "@hourly")
    return "0 * * * *";
  refuse(text, "unknown macro (known: @yearly, @annually, @monthly, "
               "@weekly, @daily, @midnight, @hourly)");
}

/// The lowest set bit at or above `from`, or -1.
template <std::size_t N>
int next_bit(const std::bitset<N>& bits, int from) {
  for (int i = from; i < static_cast<int>(N); ++i)
    if (bits.test(static_cast<std::size_t>(i)))
      return i;
  return -1;
}

} // namespace

cron_expression cron_expression::parse(std::string_view text) {
  cron_expression out;
  out.text_ = std::string{text};
  auto body = text;
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front())))
    body.remove_prefix(1);
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back())))
    body.remove_suffix(1);
  if (!body.empty() && body.front() == '@')
    body = macro(body);
  std::vector<std::string_view> fields;
  for (std::size_t i = 0; i < body.size();) {
    if (std::isspace(static_cast<unsigned char>(body[i]))) {
      ++i;
      continue;
    }
    auto end = i;
    while (end < body.size() && !std::isspace(static_cast<unsigned char>(body[end])))
      ++end;
    fields.push_back(body.substr(i, end - i));
    i = end;
  }
  if (fields.size() != 5 && fields.size() != 6)
    refuse(text, "has " + std::to_string(fields.size())
                   + " fields; it needs 5, or 6 with seconds first");
  std::size_t at = 0;
  out.has_seconds_ = fields.size() == 6;
  if (out.has_seconds_)
    out.seconds_ = parse_field<60>(text, second_field, fields[at++]);
  else
    out.seconds_.set(0);
  out.minutes_ = parse_field<60>(text, minute_field, fields[at++]);
  out.hours_ = parse_field<24>(text, hour_field, fields[at++]);
  out.days_ = parse_field<32>(text, day_field, fields[at++], &out.any_day_);
  out.months_ = parse_field<13>(text, month_field, fields[at++]);
  out.weekdays_ = parse_field<7>(text, weekday_field, fields[at++],
                                 &out.any_weekday_);
  return out;
}

bool cron_expression::day_matches(year_month_day d) const {
  bool dom = days_.test(static_cast<unsigned>(d.day()));
  bool dow = weekdays_.test(weekday{sys_days{d}}.c_encoding());
  if (any_day_ || any_weekday_)
    return dom && dow;
  return dom || dow;
}

bool cron_expression::matches(civil_seconds t) const {
  auto day = floor<days>(t);
  year_month_day d{sys_days{day.time_since_epoch()}};
  hh_mm_ss tod{t - day};
  return months_.test(static_cast<unsigned>(d.month())) && day_matches(d)
         && hours_.test(static_cast<std::size_t>(tod.hours().count()))
         && minutes_.test(static_cast<std::size_t>(tod.minutes().count()))
         && seconds_.test(static_cast<std::size_t>(tod.seconds().count()));
}

std::optional<civil_seconds> cron_expression::next(civil_seconds from) const {
  auto limit = from + years{20};
  auto t = from;
  while (t <= limit) {
    auto day = floor<days>(t);
    year_month_day d{sys_days{day.time_since_epoch()}};
    if (!months_.test(static_cast<unsigned>(d.month()))) {
      // The first day of the next month that matches (or of next year).
      auto m = next_bit(months_, static_cast<int>(unsigned(d.month())) + 1);
      auto y = d.year();
      if (m < 0) {
        y += years{1};
        m = next_bit(months_, 1);
      }
      t = civil_seconds{
        sys_days{y / month{static_cast<unsigned>(m)} / 1}.time_since_epoch()};
      continue;
    }
    if (!day_matches(d)) {
      t = day + days{1};
      continue;
    }
    hh_mm_ss tod{t - day};
    int h = static_cast<int>(tod.hours().count());
    int mi = static_cast<int>(tod.minutes().count());
    int s = static_cast<int>(tod.seconds().count());
    if (!hours_.test(static_cast<std::size_t>(h))) {
      auto nh = next_bit(hours_, h + 1);
      t = nh < 0 ? day + days{1} : day + hours{nh};
      continue;
    }
    if (!minutes_.test(static_cast<std::size_t>(mi))) {
      auto nm = next_bit(minutes_, mi + 1);
      t = nm < 0 ? day + hours{h + 1} : day + hours{h} + minutes{nm};
      continue;
    }
    if (!seconds_.test(static_cast<std::size_t>(s))) {
      auto ns = next_bit(seconds_, s + 1);
      t = ns < 0 ? day + hours{h} + minutes{mi + 1}
                 : day + hours{h} + minutes{mi} + seconds{ns};
      continue;
    }
    return t;
  }
  return std::nullopt;
}

} // namespace perdure::schedules
