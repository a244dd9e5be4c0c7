// A small, strict JSON reader and the string quoting the client's frames need. The client reads the
// gateway's few frame shapes with it and keeps application messages as their JSON text, so a game
// decodes them with whatever serializer it already uses (JsonUtility, Json.NET, ...).

using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace Ferry.Client
{
    /// <summary>What kind of value a <see cref="JsonValue"/> is.</summary>
    internal enum JsonKind { Null, Bool, Number, String, Array, Object }

    /// <summary>A JSON value as read, with its text as it stood, so a message can be passed on untouched.</summary>
    internal sealed class JsonValue
    {
        public JsonKind Kind;
        /// <summary>The value's JSON text, exactly as it was read.</summary>
        public string Raw;
        public bool Bool;
        /// <summary>A string's contents, unescaped.</summary>
        public string String;
        public List<JsonValue> Items;
        public Dictionary<string, JsonValue> Members;

        /// <summary>The member <paramref name="name"/> of an object, or null.</summary>
        public JsonValue Member(string name)
        {
            JsonValue value;
            return Members != null && Members.TryGetValue(name, out value) ? value : null;
        }

        /// <summary>Whether this is a whole number from 0 to long.MaxValue, written without a fraction or exponent.</summary>
        public bool TryGetCount(out long count)
        {
            count = 0;
            if (Kind != JsonKind.Number) return false;
            foreach (char c in Raw)
                if (c < '0' || c > '9') return false;
            return long.TryParse(Raw, NumberStyles.None, CultureInfo.InvariantCulture, out count);
        }
    }

    /// <summary>Reads and writes JSON text.</summary>
    internal static class Json
    {
        /// <summary>Deeper nesting is refused: a frame that deep is not one of the protocol's.</summary>
        const int MaxDepth = 64;

        /// <summary>Reads one JSON value that fills <paramref name="text"/>; throws FormatException saying where it is wrong.</summary>
        public static JsonValue Parse(string text)
        {
            if (text == null) throw new FormatException("no text");
            int at = 0;
            JsonValue value = Value(text, ref at, 0);
            SkipSpace(text, ref at);
            if (at != text.Length) throw Error(text, at, "text after the value");
            return value;
        }

        /// <summary>A JSON string literal holding <paramref name="s"/>.</summary>
        public static string Quote(string s)
        {
            var sb = new StringBuilder(s.Length + 2);
            sb.Append('"');
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    default:
                        if (c < 0x20) sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else sb.Append(c);
                        break;
                }
            }
            return sb.Append('"').ToString();
        }

        /// <summary>Whether two values are the same JSON: objects compared member by member, in any order.</summary>
        public static bool Same(JsonValue a, JsonValue b)
        {
            if (a.Kind != b.Kind) return false;
            switch (a.Kind)
            {
                case JsonKind.Null: return true;
                case JsonKind.Bool: return a.Bool == b.Bool;
                case JsonKind.Number:
                    return double.Parse(a.Raw, CultureInfo.InvariantCulture) == double.Parse(b.Raw, CultureInfo.InvariantCulture);
                case JsonKind.String: return a.String == b.String;
                case JsonKind.Array:
                    if (a.Items.Count != b.Items.Count) return false;
                    for (int i = 0; i < a.Items.Count; i++)
                        if (!Same(a.Items[i], b.Items[i])) return false;
                    return true;
                default:
                    if (a.Members.Count != b.Members.Count) return false;
                    foreach (var member in a.Members)
                    {
                        JsonValue other;
                        if (!b.Members.TryGetValue(member.Key, out other) || !Same(member.Value, other)) return false;
                    }
                    return true;
            }
        }

        static JsonValue Value(string text, ref int at, int depth)
        {
            if (depth > MaxDepth) throw Error(text, at, "nested more than " + MaxDepth + " deep");
            SkipSpace(text, ref at);
            if (at >= text.Length) throw Error(text, at, "the text ended where a value was expected");
            int start = at;
            var value = new JsonValue();
            char c = text[at];
            if (c == '{')
            {
                value.Kind = JsonKind.Object;
                value.Members = new Dictionary<string, JsonValue>();
                at++;
                SkipSpace(text, ref at);
                if (Peek(text, at) == '}') at++;
                else
                {
                    while (true)
                    {
                        SkipSpace(text, ref at);
                        if (Peek(text, at) != '"') throw Error(text, at, "a member name (a string) was expected");
                        string name = StringBody(text, ref at);
                        SkipSpace(text, ref at);
                        Expect(text, ref at, ':');
                        value.Members[name] = Value(text, ref at, depth + 1);
                        SkipSpace(text, ref at);
                        if (Peek(text, at) == ',') { at++; continue; }
                        Expect(text, ref at, '}');
                        break;
                    }
                }
            }
            else if (c == '[')
            {
                value.Kind = JsonKind.Array;
                value.Items = new List<JsonValue>();
                at++;
                SkipSpace(text, ref at);
                if (Peek(text, at) == ']') at++;
                else
                {
                    while (true)
                    {
                        value.Items.Add(Value(text, ref at, depth + 1));
                        SkipSpace(text, ref at);
                        if (Peek(text, at) == ',') { at++; continue; }
                        Expect(text, ref at, ']');
                        break;
                    }
                }
            }
            else if (c == '"')
            {
                value.Kind = JsonKind.String;
                value.String = StringBody(text, ref at);
            }
            else if (c == '-' || (c >= '0' && c <= '9'))
            {
                value.Kind = JsonKind.Number;
                Number(text, ref at);
            }
            else if (Word(text, ref at, "true")) { value.Kind = JsonKind.Bool; value.Bool = true; }
            else if (Word(text, ref at, "false")) value.Kind = JsonKind.Bool;
            else if (Word(text, ref at, "null")) value.Kind = JsonKind.Null;
            else throw Error(text, at, "unexpected '" + c + "'");
            value.Raw = text.Substring(start, at - start);
            return value;
        }

        /// <summary>Reads a string literal at <paramref name="at"/> (its opening quote) and returns its contents.</summary>
        static string StringBody(string text, ref int at)
        {
            at++;
            var sb = new StringBuilder();
            while (true)
            {
                if (at >= text.Length) throw Error(text, at, "a string was not closed");
                char c = text[at++];
                if (c == '"') return sb.ToString();
                if (c < 0x20) throw Error(text, at - 1, "a control character inside a string");
                if (c != '\\') { sb.Append(c); continue; }
                if (at >= text.Length) throw Error(text, at, "a string was not closed");
                char e = text[at++];
                switch (e)
                {
                    case '"': sb.Append('"'); break;
                    case '\\': sb.Append('\\'); break;
                    case '/': sb.Append('/'); break;
                    case 'b': sb.Append('\b'); break;
                    case 'f': sb.Append('\f'); break;
                    case 'n': sb.Append('\n'); break;
                    case 'r': sb.Append('\r'); break;
                    case 't': sb.Append('\t'); break;
                    case 'u':
                        int code;
                        if (at + 4 > text.Length ||
                            !int.TryParse(text.Substring(at, 4), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out code))
                            throw Error(text, at, "a \\u escape needs four hex digits");
                        sb.Append((char)code);
                        at += 4;
                        break;
                    default: throw Error(text, at - 1, "unknown escape '\\" + e + "'");
                }
            }
        }

        static void Number(string text, ref int at)
        {
            if (Peek(text, at) == '-') at++;
            if (Peek(text, at) == '0') at++;
            else if (!Digits(text, ref at)) throw Error(text, at, "a number needs digits");
            if (Peek(text, at) == '.')
            {
                at++;
                if (!Digits(text, ref at)) throw Error(text, at, "a fraction needs digits");
            }
            char e = Peek(text, at);
            if (e == 'e' || e == 'E')
            {
                at++;
                char sign = Peek(text, at);
                if (sign == '+' || sign == '-') at++;
                if (!Digits(text, ref at)) throw Error(text, at, "an exponent needs digits");
            }
        }

        static bool Digits(string text, ref int at)
        {
            int start = at;
            while (at < text.Length && text[at] >= '0' && text[at] <= '9') at++;
            return at > start;
        }

        static bool Word(string text, ref int at, string word)
        {
            if (string.CompareOrdinal(text, at, word, 0, word.Length) != 0) return false;
            at += word.Length;
            return true;
        }

        static char Peek(string text, int at)
        {
            return at < text.Length ? text[at] : '\0';
        }

        static void Expect(string text, ref int at, char c)
        {
            if (Peek(text, at) != c) throw Error(text, at, "'" + c + "' was expected");
            at++;
        }

        static void SkipSpace(string text, ref int at)
        {
            while (at < text.Length && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) at++;
        }

        static FormatException Error(string text, int at, string what)
        {
            return new FormatException("not JSON at character " + at + ": " + what);
        }
    }
}
